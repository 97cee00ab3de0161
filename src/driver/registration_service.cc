#include "driver/registration_service.h"

#include <spdlog/spdlog.h>
#include <sys/un.h>

#include "common/path.h"
#include "common/volume_contract.h"
#include "driver/rpc.h"

namespace fcc::driver {
namespace {

constexpr RpcKind kGetInfoRpc{"GetInfo"};
constexpr RpcKind kNotifyRpc{"NotifyRegistrationStatus"};

}  // namespace

std::string RegistrationSocketPath(const std::string& registration_dir) {
  return std::string(common::TrimTrailingSlashes(registration_dir)) + "/" +
         common::kDriverName + "-reg.sock";
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
  info.set_name(std::string(common::kDriverName));
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

pluginregistration::PluginInfo HandleGetInfo(
    const pluginregistration::PluginInfo& info) {
  spdlog::debug("kubelet asked for plugin info (endpoint {})", info.endpoint());
  return info;
}

pluginregistration::RegistrationStatusResponse HandleNotifyRegistrationStatus(
    const pluginregistration::RegistrationStatus& request,
    const pluginregistration::PluginInfo& info, RegistrationState& state) {
  state.Record(request.plugin_registered(), request.error());
  if (request.plugin_registered()) {
    spdlog::info("kubelet registered {} (CSI endpoint {})", common::kDriverName,
                 info.endpoint());
  } else {
    // kubelet retries with backoff; /healthz fails until it succeeds.
    spdlog::error("kubelet refused to register {}: {}", common::kDriverName,
                  request.error());
  }
  return {};
}

void RegistrationService::ServeOn(RpcServer& server) {
  using Async = pluginregistration::Registration::AsyncService;
  ServeUnary(server, service_, &Async::RequestGetInfo, kGetInfoRpc, nullptr,
             [this] { return HandleGetInfo(info_); });
  ServeUnary(server, service_, &Async::RequestNotifyRegistrationStatus,
             kNotifyRpc, nullptr,
             [this](const pluginregistration::RegistrationStatus& r) {
               return HandleNotifyRegistrationStatus(r, info_, state_);
             });
}

}  // namespace fcc::driver
