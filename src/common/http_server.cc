#include "common/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <charconv>
#include <chrono>

namespace fcc::common {

std::expected<HostPort, std::string> ParseHostPort(std::string_view flag,
                                                   std::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) {
    return std::unexpected(std::string(flag) +
                           " must be [host]:port, e.g. 0.0.0.0:9810; got \"" +
                           std::string(address) + "\"");
  }
  HostPort hp;
  std::string_view host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  hp.host = host.empty() ? "0.0.0.0" : std::string(host);
  const std::string_view port = address.substr(colon + 1);
  const auto [end, ec] =
      std::from_chars(port.data(), port.data() + port.size(), hp.port);
  if (ec != std::errc() || end != port.data() + port.size() || hp.port < 0 ||
      hp.port > 65535) {
    return std::unexpected(std::string(flag) + " port must be 0-65535, not \"" +
                           std::string(port) + "\"");
  }
  return hp;
}

std::expected<std::unique_ptr<HttpServer>, std::string> HttpServer::Start(
    std::string_view flag, std::string_view address,
    std::vector<HttpRoute> routes) {
  auto hp = ParseHostPort(flag, address);
  if (!hp) return std::unexpected(hp.error());

  std::unique_ptr<HttpServer> self(new HttpServer());
  self->server_ = std::make_unique<httplib::Server>();
  httplib::Server& http = *self->server_;
  // Scrapes and probes are rare; two threads are plenty.
  http.new_task_queue = [] { return new httplib::ThreadPool(2); };
  // httplib's default adds SO_REUSEPORT, with which a second process on the
  // same port binds too and the kernel splits the probes between them.
  http.set_socket_options([](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  for (auto& route : routes) {
    http.Get(route.path, [handler = std::move(route.handler)](
                             const httplib::Request&, httplib::Response& res) {
      HttpReply reply = handler();
      res.status = reply.status;
      res.set_content(reply.body, reply.content_type);
    });
  }
  if (hp->port == 0) {
    self->port_ = http.bind_to_any_port(hp->host);
  } else if (http.bind_to_port(hp->host, hp->port)) {
    self->port_ = hp->port;
  } else {
    self->port_ = -1;
  }
  if (self->port_ <= 0) {
    return std::unexpected("cannot listen on " + std::string(flag) + " " +
                           std::string(address) +
                           " (in use, or not an address of this host)");
  }
  self->thread_ = std::thread([&http] { http.listen_after_bind(); });
  // stop() is a no-op until the loop runs; wait so ~HttpServer can stop it.
  for (int i = 0; i < 2000 && !http.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return self;
}

HttpServer::~HttpServer() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace fcc::common
