#include "driver/http_server.h"

#include <httplib.h>

#include <charconv>
#include <chrono>

#include "driver/metrics.h"

namespace fcc::driver {

std::expected<HostPort, std::string> ParseHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return std::unexpected("--metrics-address must be host:port, e.g. " +
                           std::string("0.0.0.0:9810"));
  }
  HostPort hp;
  hp.host = address.substr(0, colon);
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  if (hp.host.empty()) hp.host = "0.0.0.0";
  const std::string port = address.substr(colon + 1);
  const auto [end, ec] =
      std::from_chars(port.data(), port.data() + port.size(), hp.port);
  if (ec != std::errc() || end != port.data() + port.size() || hp.port < 0 ||
      hp.port > 65535) {
    return std::unexpected("--metrics-address port must be 0-65535, not \"" +
                           port + "\"");
  }
  return hp;
}

std::expected<std::unique_ptr<HttpServer>, std::string> HttpServer::Start(
    const std::string& address, Metrics& metrics, HealthFunction health) {
  auto hp = ParseHostPort(address);
  if (!hp) return std::unexpected(hp.error());

  std::unique_ptr<HttpServer> self(new HttpServer());
  self->server_ = std::make_unique<httplib::Server>();
  httplib::Server& http = *self->server_;
  // Scrapes and probes are rare; two threads are plenty.
  http.new_task_queue = [] { return new httplib::ThreadPool(2); };
  http.Get("/metrics",
           [&metrics](const httplib::Request&, httplib::Response& res) {
             res.set_content(metrics.Render(), "text/plain; version=0.0.4");
           });
  http.Get("/healthz", [health = std::move(health)](const httplib::Request&,
                                                    httplib::Response& res) {
    const auto healthy = health();
    res.status = healthy ? 200 : 503;
    res.set_content(healthy ? "ok\n" : healthy.error() + "\n", "text/plain");
  });

  if (hp->port == 0) {
    self->port_ = http.bind_to_any_port(hp->host);
  } else if (http.bind_to_port(hp->host, hp->port)) {
    self->port_ = hp->port;
  } else {
    self->port_ = -1;
  }
  if (self->port_ <= 0) {
    return std::unexpected("cannot listen on --metrics-address " + address +
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

}  // namespace fcc::driver
