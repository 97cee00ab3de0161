#include "driver/identity_service.h"

#include "common/volume_contract.h"

namespace fcc::driver {
namespace {

constexpr RpcKind kPluginInfoRpc{"GetPluginInfo"};
constexpr RpcKind kPluginCapabilitiesRpc{"GetPluginCapabilities"};
constexpr RpcKind kProbeRpc{"Probe"};

}  // namespace

csi::v1::GetPluginInfoResponse HandleGetPluginInfo() {
  csi::v1::GetPluginInfoResponse response;
  response.set_name(std::string(common::kDriverName));
  response.set_vendor_version(FCC_VERSION);
  return response;
}

csi::v1::GetPluginCapabilitiesResponse HandleGetPluginCapabilities() {
  return {};
}

csi::v1::ProbeResponse HandleProbe() {
  csi::v1::ProbeResponse response;
  response.mutable_ready()->set_value(true);
  return response;
}

void IdentityService::ServeOn(RpcServer& server) {
  using Async = csi::v1::Identity::AsyncService;
  ServeUnary(server, service_, &Async::RequestGetPluginInfo, kPluginInfoRpc,
             nullptr, HandleGetPluginInfo);
  ServeUnary(server, service_, &Async::RequestGetPluginCapabilities,
             kPluginCapabilitiesRpc, nullptr, HandleGetPluginCapabilities);
  ServeUnary(server, service_, &Async::RequestProbe, kProbeRpc, nullptr,
             HandleProbe);
}

}  // namespace fcc::driver
