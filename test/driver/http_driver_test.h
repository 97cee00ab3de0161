// A DriverTest whose driver serves /metrics and /healthz on a free loopback
// port, with a GET over real HTTP. Its own header: cpp-httplib is large, and
// only the tests that speak HTTP should compile it.
#pragma once

#include <httplib.h>

#include <string>

#include "driver_test_env.h"

namespace fcc::testing {

class HttpDriverTest : public DriverTest {
 protected:
  DriverProcess::Options DriverOptions() const override {
    auto options = DriverTest::DriverOptions();
    options.extra_args.push_back("--metrics-address=127.0.0.1:" +
                                 std::to_string(port_));
    return options;
  }

  // GET `path`: the body, and the status in `status` (-1 and "" when
  // nothing answered, which also fails the test).
  std::string Get(const std::string& path, int* status = nullptr) {
    httplib::Client http("127.0.0.1", port_);
    auto res = http.Get(path.c_str());
    EXPECT_TRUE(res) << "GET " << path << ": "
                     << httplib::to_string(res.error()) << "\n"
                     << log();
    if (status) *status = res ? res->status : -1;
    return res ? res->body : "";
  }

  int port_ = FreeLoopbackPort();
};

}  // namespace fcc::testing
