#include "driver/registration_service.h"

#include <spdlog/spdlog.h>
#include <sys/un.h>

#include "driver/node_service.h"  // FinishUnary
#include "driver/volume_request.h"

namespace fcc::driver {

std::string RegistrationSocketPath(const std::string& registration_dir) {
  std::string dir = registration_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir + "/" + std::string(kDriverName) + "-reg.sock";
}

std::expected<void, std::string> CheckKubeletRegistrationPath(
    const std::string& path) {
  if (path.starts_with("unix:")) {
    return std::unexpected(
        "--kubelet-registration-path must be a plain path such as " +
        std::string(kDefaultKubeletRegistrationPath) +
        ", without \"unix:\" (kubelet dials it as a unix socket path)");
  }
  if (path.empty() || path.front() != '/') {
    return std::unexpected(
        "--kubelet-registration-path must be the CSI socket's absolute path "
        "on the host, e.g. " +
        std::string(kDefaultKubeletRegistrationPath));
  }
  if (path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return std::unexpected(
        "--kubelet-registration-path is longer than 107 bytes");
  }
  return {};
}

pluginregistration::PluginInfo MakePluginInfo(
    const std::string& kubelet_registration_path) {
  pluginregistration::PluginInfo info;
  info.set_type(std::string(kCsiPluginType));
  info.set_name(std::string(kDriverName));
  info.set_endpoint(kubelet_registration_path);
  info.add_supported_versions(std::string(kCsiSupportedVersion));
  return info;
}

void RegistrationState::Record(bool registered, const std::string& error) {
  std::lock_guard lock(mu_);
  if (registered) {
    failure_.reset();
  } else {
    failure_ = error.empty() ? "kubelet gave no reason" : error;
  }
}

std::optional<std::string> RegistrationState::Failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

grpc::ServerUnaryReactor* RegistrationCallbackService::GetInfo(
    grpc::CallbackServerContext* context,
    const pluginregistration::InfoRequest*,
    pluginregistration::PluginInfo* response) {
  *response = info_;
  spdlog::debug("kubelet asked for plugin info (endpoint {})",
                info_.endpoint());
  return FinishUnary(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* RegistrationCallbackService::NotifyRegistrationStatus(
    grpc::CallbackServerContext* context,
    const pluginregistration::RegistrationStatus* request,
    pluginregistration::RegistrationStatusResponse*) {
  state_.Record(request->plugin_registered(), request->error());
  if (request->plugin_registered()) {
    spdlog::info("kubelet registered {} (CSI endpoint {})", kDriverName,
                 info_.endpoint());
  } else {
    // kubelet retries with backoff; /healthz fails until it succeeds.
    spdlog::error("kubelet refused to register {}: {}", kDriverName,
                  request->error());
  }
  return FinishUnary(context, grpc::Status::OK);
}

}  // namespace fcc::driver
