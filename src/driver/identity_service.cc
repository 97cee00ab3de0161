#include "driver/identity_service.h"

#include "common/names.h"
#include "driver/rpc.h"

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

grpc::ServerUnaryReactor* IdentityService::GetPluginInfo(
    grpc::CallbackServerContext* context, const csi::v1::GetPluginInfoRequest*,
    csi::v1::GetPluginInfoResponse* response) {
  return ServeRpc(context, kPluginInfoRpc, nullptr, response,
                  HandleGetPluginInfo);
}

grpc::ServerUnaryReactor* IdentityService::GetPluginCapabilities(
    grpc::CallbackServerContext* context,
    const csi::v1::GetPluginCapabilitiesRequest*,
    csi::v1::GetPluginCapabilitiesResponse* response) {
  return ServeRpc(context, kPluginCapabilitiesRpc, nullptr, response,
                  HandleGetPluginCapabilities);
}

grpc::ServerUnaryReactor* IdentityService::Probe(
    grpc::CallbackServerContext* context, const csi::v1::ProbeRequest*,
    csi::v1::ProbeResponse* response) {
  return ServeRpc(context, kProbeRpc, nullptr, response, HandleProbe);
}

}  // namespace fcc::driver
