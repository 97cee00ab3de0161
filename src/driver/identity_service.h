// CSI Identity: who the plugin is, and whether it is ready.
#pragma once

#include "csi.grpc.pb.h"
#include "driver/rpc.h"

namespace fcc::driver {

// The handlers (see node_service.h).
csi::v1::GetPluginInfoResponse HandleGetPluginInfo();
// Node-only: no CONTROLLER_SERVICE, no topology.
csi::v1::GetPluginCapabilitiesResponse HandleGetPluginCapabilities();
// Ready as soon as it serves: the server starts only after the master key
// has loaded.
csi::v1::ProbeResponse HandleProbe();

class IdentityService final {
 public:
  // For grpc::ServerBuilder::RegisterService.
  grpc::Service* service() { return &service_; }
  // Serves every Identity RPC on `server`, which `service()` was registered
  // with.
  void ServeOn(RpcServer& server);

 private:
  csi::v1::Identity::AsyncService service_;
};

}  // namespace fcc::driver
