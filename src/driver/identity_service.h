// CSI Identity: who the plugin is, and whether it is ready.
#pragma once

#include "csi.grpc.pb.h"

namespace fcc::driver {

class IdentityService final : public csi::v1::Identity::Service {
 public:
  grpc::Status GetPluginInfo(grpc::ServerContext*,
                             const csi::v1::GetPluginInfoRequest*,
                             csi::v1::GetPluginInfoResponse* response) override;
  // Node-only: no CONTROLLER_SERVICE, no topology.
  grpc::Status GetPluginCapabilities(
      grpc::ServerContext*, const csi::v1::GetPluginCapabilitiesRequest*,
      csi::v1::GetPluginCapabilitiesResponse*) override;
  // Ready as soon as it serves: the server starts only after the master key
  // has loaded.
  grpc::Status Probe(grpc::ServerContext*, const csi::v1::ProbeRequest*,
                     csi::v1::ProbeResponse* response) override;
};

// Serves `identity` through gRPC's callback API (see NodeCallbackService).
class IdentityCallbackService final
    : public csi::v1::Identity::CallbackService {
 public:
  explicit IdentityCallbackService(IdentityService& identity)
      : identity_(identity) {}

  grpc::ServerUnaryReactor* GetPluginInfo(
      grpc::CallbackServerContext* context,
      const csi::v1::GetPluginInfoRequest* request,
      csi::v1::GetPluginInfoResponse* response) override;
  grpc::ServerUnaryReactor* GetPluginCapabilities(
      grpc::CallbackServerContext* context,
      const csi::v1::GetPluginCapabilitiesRequest* request,
      csi::v1::GetPluginCapabilitiesResponse* response) override;
  grpc::ServerUnaryReactor* Probe(grpc::CallbackServerContext* context,
                                  const csi::v1::ProbeRequest* request,
                                  csi::v1::ProbeResponse* response) override;

 private:
  IdentityService& identity_;
};

}  // namespace fcc::driver
