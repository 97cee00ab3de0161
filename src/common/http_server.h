// The side-server both binaries run for probes and scrapes (/healthz,
// /readyz, /metrics), in threads of its own so a slow client never holds a
// CSI or reconcile thread.
#pragma once

#include <expected>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace httplib {
class Server;
}

namespace fcc::common {

struct HostPort {
  std::string host;
  int port = 0;
};
// "0.0.0.0:9810", "127.0.0.1:0", "[::]:9810", ":9810" (all IPv4). Errors
// name `flag`, the option the address came from.
std::expected<HostPort, std::string> ParseHostPort(std::string_view flag,
                                                   std::string_view address);

struct HttpReply {
  int status = 200;
  std::string body;
  std::string content_type = "text/plain";
};
struct HttpRoute {
  std::string path;  // answered on GET
  std::function<HttpReply()> handler;
};

class HttpServer {
 public:
  // Binds the address in `flag`'s value (port 0: any free port) and serves
  // `routes` in the background.
  static std::expected<std::unique_ptr<HttpServer>, std::string> Start(
      std::string_view flag, std::string_view address,
      std::vector<HttpRoute> routes);
  ~HttpServer();  // stops and joins

  int port() const { return port_; }

 private:
  HttpServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace fcc::common
