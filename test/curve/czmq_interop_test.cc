// CZMQ's zcert_load (what Flux before 0.55 used, and the reference ZPL
// reader) must load our file and report the same keys.
#include <czmq.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>

#include "curve/cert.h"

namespace fcc::curve {
namespace {

TEST(CzmqInterop, ZcertLoadReadsRenderedCert) {
  const MiniClusterId id{"hpc", "mc-1", "0f8e4b5c"};
  const CurveKeypair keys = DeriveKeypair(Secret(std::string(40, 'q')), id);
  // Key material goes to tmpfs only.
  char dir[] = "/dev/shm/fcc-czmq-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/curve.cert";
  {
    std::ofstream out(path);
    out << RenderCert(id.QualifiedName(), keys).reveal();
  }
  zcert_t* cert = zcert_load(path.c_str());
  ASSERT_NE(cert, nullptr) << "zcert_load refused " << path;
  EXPECT_STREQ(zcert_public_txt(cert), keys.public_z85.c_str());
  EXPECT_EQ(std::string_view(zcert_secret_txt(cert)), keys.secret_z85.reveal());
  EXPECT_STREQ(zcert_meta(cert, "name"), "hpc.mc-1");
  zcert_destroy(&cert);
  unlink(path.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace fcc::curve
