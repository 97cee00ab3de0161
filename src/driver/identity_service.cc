#include "driver/identity_service.h"

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

}  // namespace fcc::driver
