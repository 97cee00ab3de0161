// The side-server both binaries run for probes and scrapes (/healthz,
// /readyz, /metrics), in threads of its own so a slow client never holds a
// CSI or reconcile thread. Any pod that reaches the port is a client, so
// what one client can hold is bounded (HttpLimits): a whole request must
// arrive within its deadline, at most `workers` are served at once and
// `queued` wait; beyond that the server stops accepting (the kernel's backlog
// holds the rest), so connections never use up the process's file descriptors.
#pragma once

#include <expected>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct mg_connection;
struct mg_context;

namespace fcc::common {

struct HostPort {
  std::string host;
  int port = 0;
};
// "0.0.0.0:9810", "127.0.0.1:0", ":9810" (all IPv4). Errors name `flag`,
// the option the address came from. IPv6 ("[::1]:9810") parses, but the
// server refuses it: Debian's civetweb is built without IPv6.
std::expected<HostPort, std::string> ParseHostPort(std::string_view flag,
                                                   std::string_view address);

struct HttpReply {
  int status = 200;
  std::string body;
  std::string content_type = "text/plain";
};
struct HttpRoute {
  std::string path;  // answered on GET (and HEAD)
  std::function<HttpReply()> handler;
};

struct HttpLimits {
  int request_deadline_ms = 1000;  // the whole request line and headers
  int workers = 4;
  int queued = 8;
  int backlog = 16;
};

class HttpServer {
 public:
  // Binds the address in `flag`'s value (port 0: any free port) and serves
  // `routes` in the background.
  static std::expected<std::unique_ptr<HttpServer>, std::string> Start(
      std::string_view flag, std::string_view address,
      std::vector<HttpRoute> routes, const HttpLimits& limits = {});
  ~HttpServer();  // stops and joins

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }

 private:
  explicit HttpServer(std::vector<HttpRoute> routes)
      : routes_(std::move(routes)) {}
  static int Serve(mg_connection* conn, void* self);

  std::vector<HttpRoute> routes_;
  mg_context* context_ = nullptr;
  std::string wake_host_;  // where a connection reaches the listener
  int port_ = 0;
};

}  // namespace fcc::common
