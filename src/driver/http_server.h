// GET /metrics (Prometheus) and GET /healthz on a TCP address, in threads of
// its own so a slow scraper or probe never holds a CSI thread.
#pragma once

#include <expected>
#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace httplib {
class Server;
}

namespace fcc::driver {

class Metrics;

// Healthy, or a short reason for the 503's body.
using HealthFunction = std::function<std::expected<void, std::string>()>;

struct HostPort {
  std::string host;
  int port = 0;
};
// "0.0.0.0:9810", "127.0.0.1:0", "[::]:9810", ":9810" (all IPv4).
std::expected<HostPort, std::string> ParseHostPort(const std::string& address);

class HttpServer {
 public:
  // Binds `address` (port 0: any free port) and serves in the background.
  // /healthz answers 200 while `health` says healthy, else 503 and why.
  static std::expected<std::unique_ptr<HttpServer>, std::string> Start(
      const std::string& address, Metrics& metrics, HealthFunction health);
  ~HttpServer();  // stops and joins

  int port() const { return port_; }

 private:
  HttpServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace fcc::driver
