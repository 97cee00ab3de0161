// CSI Node: publish and unpublish; everything else is UNIMPLEMENTED (the
// generated base class answers so for the RPCs not overridden here).
#pragma once

#include <string>

#include "csi.grpc.pb.h"
#include "driver/metrics.h"
#include "driver/publisher.h"

namespace fcc::driver {

class NodeService final : public csi::v1::Node::Service {
 public:
  // `metrics` (optional) counts and times publish and unpublish.
  NodeService(std::string node_id, Publisher& publisher,
              Metrics* metrics = nullptr, ValidationPolicy policy = {});

  grpc::Status NodePublishVolume(
      grpc::ServerContext*, const csi::v1::NodePublishVolumeRequest* request,
      csi::v1::NodePublishVolumeResponse*) override;
  grpc::Status NodeUnpublishVolume(
      grpc::ServerContext*, const csi::v1::NodeUnpublishVolumeRequest* request,
      csi::v1::NodeUnpublishVolumeResponse*) override;
  // Advertises nothing: no staging, no stats, no expansion.
  grpc::Status NodeGetCapabilities(
      grpc::ServerContext*, const csi::v1::NodeGetCapabilitiesRequest*,
      csi::v1::NodeGetCapabilitiesResponse*) override;
  grpc::Status NodeGetInfo(grpc::ServerContext*,
                           const csi::v1::NodeGetInfoRequest*,
                           csi::v1::NodeGetInfoResponse* response) override;

 private:
  const std::string node_id_;
  Publisher& publisher_;
  Metrics* const metrics_;
  const ValidationPolicy policy_;
};

}  // namespace fcc::driver
