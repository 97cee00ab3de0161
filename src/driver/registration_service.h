// kubelet plugin registration served by the driver itself: kubelet's plugin
// watcher finds <driver>-reg.sock in its plugins_registry directory, asks
// GetInfo where the CSI socket is and reports back whether it registered the
// driver. This replaces the node-driver-registrar sidecar.
#pragma once

#include <expected>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "driver/rpc.h"
#include "pluginregistration.grpc.pb.h"

namespace fcc::driver {

// kubelet's handler name for CSI drivers (pluginregistration/v1 CSIPlugin).
inline constexpr std::string_view kCsiPluginType = "CSIPlugin";
// kubelet's CSI handler takes the highest 1.x version listed; every CSI v1
// driver announces "1.0.0", as node-driver-registrar does.
inline constexpr std::string_view kCsiSupportedVersion = "1.0.0";
inline constexpr std::string_view kDefaultKubeletRegistrationPath =
    "/var/lib/kubelet/plugins/curve.minicluster.dev/csi.sock";

// <dir>/curve.minicluster.dev-reg.sock: kubelet's <driver>-reg.sock naming.
std::string RegistrationSocketPath(const std::string& registration_dir);

// kubelet dials PluginInfo.endpoint as a plain unix socket path (no
// "unix://"), from the host: refuse what it could never connect to.
std::expected<void, std::string> CheckKubeletRegistrationPath(
    const std::string& path);

// What GetInfo answers.
pluginregistration::PluginInfo MakePluginInfo(
    const std::string& kubelet_registration_path);

// kubelet's latest registration verdict, for /healthz. Thread-safe.
class RegistrationState {
 public:
  void Record(bool registered, const std::string& error);
  // kubelet's error text while its latest verdict is a refusal.
  std::optional<std::string> Failure() const;

 private:
  mutable std::mutex mu_;
  std::optional<std::string> failure_;
};

// The handlers (see node_service.h).
pluginregistration::PluginInfo HandleGetInfo(
    const pluginregistration::PluginInfo& info);
pluginregistration::RegistrationStatusResponse HandleNotifyRegistrationStatus(
    const pluginregistration::RegistrationStatus& request,
    const pluginregistration::PluginInfo& info, RegistrationState& state);

class RegistrationService final {
 public:
  RegistrationService(pluginregistration::PluginInfo info,
                      RegistrationState& state)
      : info_(std::move(info)), state_(state) {}

  // For grpc::ServerBuilder::RegisterService.
  grpc::Service* service() { return &service_; }
  // Serves GetInfo and NotifyRegistrationStatus on `server`, which
  // `service()` was registered with.
  void ServeOn(RpcServer& server);

 private:
  pluginregistration::Registration::AsyncService service_;
  const pluginregistration::PluginInfo info_;
  RegistrationState& state_;
};

}  // namespace fcc::driver
