// CSI Identity: who the plugin is, and whether it is ready.
#pragma once

#include "csi.grpc.pb.h"

namespace fcc::driver {

// The handlers (see node_service.h).
csi::v1::GetPluginInfoResponse HandleGetPluginInfo();
// Node-only: no CONTROLLER_SERVICE, no topology.
csi::v1::GetPluginCapabilitiesResponse HandleGetPluginCapabilities();
// Ready as soon as it serves: the server starts only after the master key
// has loaded.
csi::v1::ProbeResponse HandleProbe();

class IdentityService final : public csi::v1::Identity::CallbackService {
 public:
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
};

}  // namespace fcc::driver
