#include "health.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

namespace fcc::controller {

HealthServer::HealthServer(std::string host, int port,
                           std::function<bool()> ready)
    : host_(std::move(host)),
      port_(port),
      ready_(std::move(ready)),
      server_(std::make_unique<httplib::Server>()) {
  server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  server_->Get("/readyz",
               [this](const httplib::Request&, httplib::Response& res) {
                 if (ready_()) {
                   res.set_content("ok\n", "text/plain");
                 } else {
                   res.status = 503;
                   res.set_content("caches not synced\n", "text/plain");
                 }
               });
}

HealthServer::~HealthServer() { Stop(); }

bool HealthServer::Start() {
  if (!server_->bind_to_port(host_.c_str(), port_)) {
    spdlog::error("health: cannot listen on {}:{}", host_, port_);
    return false;
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  spdlog::info("health: serving /healthz and /readyz on {}:{}", host_, port_);
  return true;
}

void HealthServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

bool ParseListenAddress(const std::string& address, std::string* host,
                        int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return false;
  std::string h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']')
    h = h.substr(1, h.size() - 2);
  *host = h.empty() ? "0.0.0.0" : h;
  try {
    *port = std::stoi(address.substr(colon + 1));
  } catch (const std::exception&) {
    return false;
  }
  return *port > 0 && *port < 65536;
}

}  // namespace fcc::controller
