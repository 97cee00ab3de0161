#include "driver/identity_service.h"

#include "driver/node_service.h"  // FinishUnary
#include "driver/volume_request.h"

namespace fcc::driver {

grpc::Status IdentityService::GetPluginInfo(
    grpc::ServerContext*, const csi::v1::GetPluginInfoRequest*,
    csi::v1::GetPluginInfoResponse* response) {
  response->set_name(std::string(kDriverName));
  response->set_vendor_version(FCC_VERSION);
  return grpc::Status::OK;
}

grpc::Status IdentityService::GetPluginCapabilities(
    grpc::ServerContext*, const csi::v1::GetPluginCapabilitiesRequest*,
    csi::v1::GetPluginCapabilitiesResponse*) {
  return grpc::Status::OK;
}

grpc::Status IdentityService::Probe(grpc::ServerContext*,
                                    const csi::v1::ProbeRequest*,
                                    csi::v1::ProbeResponse* response) {
  response->mutable_ready()->set_value(true);
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* IdentityCallbackService::GetPluginInfo(
    grpc::CallbackServerContext* context,
    const csi::v1::GetPluginInfoRequest* request,
    csi::v1::GetPluginInfoResponse* response) {
  return FinishUnary(context,
                     identity_.GetPluginInfo(nullptr, request, response));
}

grpc::ServerUnaryReactor* IdentityCallbackService::GetPluginCapabilities(
    grpc::CallbackServerContext* context,
    const csi::v1::GetPluginCapabilitiesRequest* request,
    csi::v1::GetPluginCapabilitiesResponse* response) {
  return FinishUnary(
      context, identity_.GetPluginCapabilities(nullptr, request, response));
}

grpc::ServerUnaryReactor* IdentityCallbackService::Probe(
    grpc::CallbackServerContext* context, const csi::v1::ProbeRequest* request,
    csi::v1::ProbeResponse* response) {
  return FinishUnary(context, identity_.Probe(nullptr, request, response));
}

}  // namespace fcc::driver
