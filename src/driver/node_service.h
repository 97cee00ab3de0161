// CSI Node: publish and unpublish; staging, stats and expansion are
// UNIMPLEMENTED.
//
// The Handle* functions are the handlers, plain functions of the request and
// what they need (the fuzz target calls them directly); NodeService serves
// them through ServeUnary, which logs and counts each call.
#pragma once

#include <cstdint>
#include <string>

#include "csi.grpc.pb.h"
#include "driver/publisher.h"
#include "driver/rpc.h"
#include "driver/view/publisher.h"
#include "driver/volume_request.h"

namespace fcc::driver {

// A request whose volumeAttributes name a view goes to `views` (nullptr: a
// driver serving no views); every other to `publisher`. An unpublish first
// unmounts any view at the target, then lets `publisher` finish.
RpcAnswer<csi::v1::NodePublishVolumeResponse> HandleNodePublishVolume(
    const csi::v1::NodePublishVolumeRequest& request, Publisher& publisher,
    const ValidationPolicy& policy, ViewPublisher* views = nullptr);
RpcAnswer<csi::v1::NodeUnpublishVolumeResponse> HandleNodeUnpublishVolume(
    const csi::v1::NodeUnpublishVolumeRequest& request, Publisher& publisher,
    const ValidationPolicy& policy, ViewPublisher* views = nullptr);
// Advertises nothing: no staging, no stats, no expansion.
csi::v1::NodeGetCapabilitiesResponse HandleNodeGetCapabilities();
// max_volumes_per_node is the driver's --max-volumes-per-node.
csi::v1::NodeGetInfoResponse HandleNodeGetInfo(const std::string& node_id,
                                               uint32_t max_volumes_per_node);

class NodeService final {
 public:
  // `observer` (optional, the driver's Metrics) counts and times publish and
  // unpublish.
  NodeService(std::string node_id, Publisher& publisher,
              RpcObserver* observer = nullptr, ValidationPolicy policy = {},
              ViewPublisher* views = nullptr);

  // For grpc::ServerBuilder::RegisterService.
  grpc::Service* service() { return &service_; }
  // Serves every Node RPC on `server`, which `service()` was registered with.
  void ServeOn(RpcServer& server);

 private:
  csi::v1::Node::AsyncService service_;
  const std::string node_id_;
  Publisher& publisher_;
  RpcObserver* const observer_;
  const ValidationPolicy policy_;
  ViewPublisher* const views_;
};

}  // namespace fcc::driver
