// CSI Node: publish and unpublish; everything else is UNIMPLEMENTED (the
// generated base class answers so for the RPCs not overridden here).
//
// The Handle* functions are the handlers, plain functions of the request and
// what they need (the fuzz target calls them directly); NodeService serves
// them through ServeRpc, which logs and counts each call.
#pragma once

#include <string>

#include "csi.grpc.pb.h"
#include "driver/metrics.h"
#include "driver/publisher.h"
#include "driver/rpc.h"
#include "driver/volume_request.h"

namespace fcc::driver {

RpcAnswer<csi::v1::NodePublishVolumeResponse> HandleNodePublishVolume(
    const csi::v1::NodePublishVolumeRequest& request, Publisher& publisher,
    const ValidationPolicy& policy);
RpcAnswer<csi::v1::NodeUnpublishVolumeResponse> HandleNodeUnpublishVolume(
    const csi::v1::NodeUnpublishVolumeRequest& request, Publisher& publisher,
    const ValidationPolicy& policy);
// Advertises nothing: no staging, no stats, no expansion.
csi::v1::NodeGetCapabilitiesResponse HandleNodeGetCapabilities();
csi::v1::NodeGetInfoResponse HandleNodeGetInfo(const std::string& node_id);

// The handlers block only for bounded work (a few syscalls, at most one key
// derivation); gRPC's callback executor adds threads when all of its own are
// busy.
class NodeService final : public csi::v1::Node::CallbackService {
 public:
  // `metrics` (optional) counts and times publish and unpublish.
  NodeService(std::string node_id, Publisher& publisher,
              Metrics* metrics = nullptr, ValidationPolicy policy = {});

  grpc::ServerUnaryReactor* NodePublishVolume(
      grpc::CallbackServerContext* context,
      const csi::v1::NodePublishVolumeRequest* request,
      csi::v1::NodePublishVolumeResponse* response) override;
  grpc::ServerUnaryReactor* NodeUnpublishVolume(
      grpc::CallbackServerContext* context,
      const csi::v1::NodeUnpublishVolumeRequest* request,
      csi::v1::NodeUnpublishVolumeResponse* response) override;
  grpc::ServerUnaryReactor* NodeGetCapabilities(
      grpc::CallbackServerContext* context,
      const csi::v1::NodeGetCapabilitiesRequest* request,
      csi::v1::NodeGetCapabilitiesResponse* response) override;
  grpc::ServerUnaryReactor* NodeGetInfo(
      grpc::CallbackServerContext* context,
      const csi::v1::NodeGetInfoRequest* request,
      csi::v1::NodeGetInfoResponse* response) override;

 private:
  const std::string node_id_;
  Publisher& publisher_;
  Metrics* const metrics_;
  const ValidationPolicy policy_;
};

}  // namespace fcc::driver
