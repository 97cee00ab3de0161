#include "common/http_server.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <thread>

#include "common/unique_fd.h"

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

namespace {

void InitCivetwebOnce() {
  static const bool initialised = [] {
    mg_init_library(0);
    return true;
  }();
  (void)initialised;
}

// civetweb's own messages (a refused or timed-out client) join the one JSON
// log at debug: they are the client's problem, not the operator's.
int LogCivetwebMessage(const mg_connection*, const char* message) {
  spdlog::debug("http: {}", message);
  return 1;
}

// HEAD gets GET's status and headers without the body.
void Reply(mg_connection* conn, const HttpReply& reply, bool head = false) {
  mg_response_header_start(conn, reply.status);
  mg_response_header_add(conn, "Content-Type", reply.content_type.c_str(), -1);
  const std::string length = std::to_string(reply.body.size());
  mg_response_header_add(conn, "Content-Length", length.c_str(), -1);
  mg_response_header_send(conn);
  if (!head) mg_write(conn, reply.body.data(), reply.body.size());
}

// True if the connection was started (non-blocking: it completes later).
bool WakeListener(const std::string& host, int port) {
  const UniqueFd fd(
      socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (!fd || inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return false;
  }
  return connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr),
                 sizeof addr) == 0 ||
         errno == EINPROGRESS;
}

}  // namespace

int HttpServer::Serve(mg_connection* conn, void* self) {
  const mg_request_info* request = mg_get_request_info(conn);
  const auto& routes = static_cast<HttpServer*>(self)->routes_;
  const std::string_view uri = request->local_uri ? request->local_uri : "";
  const auto route = std::ranges::find(routes, uri, &HttpRoute::path);
  if (route == routes.end()) {
    Reply(conn, {404, "not found\n"});
  } else if (const std::string_view method = request->request_method;
             method == "GET" || method == "HEAD") {
    Reply(conn, route->handler(), method == "HEAD");
  } else {
    Reply(conn, {405, "only GET and HEAD\n"});
  }
  return 1;  // answered
}

std::expected<std::unique_ptr<HttpServer>, std::string> HttpServer::Start(
    std::string_view flag, std::string_view address,
    std::vector<HttpRoute> routes, const HttpLimits& limits) {
  auto hp = ParseHostPort(flag, address);
  if (!hp) return std::unexpected(hp.error());
  if (hp->host.find(':') != std::string::npos) {
    return std::unexpected(std::string(flag) + " " + std::string(address) +
                           ": IPv6 is not supported (Debian's civetweb is "
                           "built without it); use an IPv4 address such as "
                           "0.0.0.0:" +
                           std::to_string(hp->port));
  }
  InitCivetwebOnce();
  std::unique_ptr<HttpServer> self(new HttpServer(std::move(routes)));
  const std::string ports = hp->host + ":" + std::to_string(hp->port);
  const std::string deadline = std::to_string(limits.request_deadline_ms);
  const std::string workers = std::to_string(limits.workers);
  const std::string queued = std::to_string(limits.queued);
  const std::string backlog = std::to_string(limits.backlog);
  // No document_root: nothing but the routes is served. No keep-alive: a
  // connection is one request, so the deadline bounds its whole life.
  const char* options[] = {"listening_ports",
                           ports.c_str(),
                           "request_timeout_ms",
                           deadline.c_str(),
                           "num_threads",
                           workers.c_str(),
                           "connection_queue",
                           queued.c_str(),
                           "listen_backlog",
                           backlog.c_str(),
                           "enable_keep_alive",
                           "no",
                           nullptr};
  mg_callbacks callbacks{};
  callbacks.log_message = LogCivetwebMessage;
  mg_init_data init{};
  init.callbacks = &callbacks;
  init.user_data = self.get();
  init.configuration_options = options;
  char error[256] = {};
  mg_error_data error_data{};
  error_data.text = error;
  error_data.text_buffer_size = sizeof error;
  self->context_ = mg_start2(&init, &error_data);
  if (self->context_ == nullptr) {
    return std::unexpected(
        "cannot listen on " + std::string(flag) + " " + std::string(address) +
        " (in use, or not an address of this host): " + error);
  }
  mg_server_port bound{};
  if (mg_get_server_ports(self->context_, 1, &bound) != 1) {
    return std::unexpected("cannot listen on " + std::string(flag) + " " +
                           std::string(address) + ": no port bound");
  }
  self->port_ = bound.port;
  self->wake_host_ = hp->host == "0.0.0.0" ? "127.0.0.1" : hp->host;
  mg_set_request_handler(self->context_, "/", &HttpServer::Serve, self.get());
  return self;
}

// civetweb's accepting thread polls in 2 s quanta and only then sees a stop;
// a connection wakes it at once.
HttpServer::~HttpServer() {
  if (context_ == nullptr) return;
  std::atomic<bool> stopped = false;
  std::thread stopper([this, &stopped] {
    mg_stop(context_);
    stopped = true;
  });
  while (!stopped) {
    WakeListener(wake_host_, port_);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stopper.join();
}

}  // namespace fcc::common
