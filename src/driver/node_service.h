// CSI Node: publish and unpublish; everything else is UNIMPLEMENTED (the
// generated base class answers so for the RPCs not overridden here).
//
// NodeService holds the handlers (called directly by the fuzz target);
// NodeCallbackService is what the server registers: gRPC's callback API runs
// each handler on the thread that read the request, where the synchronous
// server hands every call to a pool thread (and, with more calls in flight
// than its 2 pollers, creates and ends a thread per call).
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

// Serves `node` through gRPC's callback API. The handlers block for their
// syscalls (~100 us) and at most one key derivation, all bounded; gRPC's
// callback executor adds threads when every one of its threads is busy.
class NodeCallbackService final : public csi::v1::Node::CallbackService {
 public:
  explicit NodeCallbackService(NodeService& node) : node_(node) {}

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
  NodeService& node_;
};

// Finishes a unary callback RPC with `status` (the handler already filled in
// the response).
grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      grpc::Status status);

}  // namespace fcc::driver
