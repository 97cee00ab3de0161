#include "driver/node_service.h"

namespace fcc::driver {
namespace {

constexpr RpcKind kPublishRpc{"NodePublishVolume", CountedRpc::kPublish};
constexpr RpcKind kUnpublishRpc{"NodeUnpublishVolume", CountedRpc::kUnpublish};
constexpr RpcKind kCapabilitiesRpc{"NodeGetCapabilities"};
constexpr RpcKind kInfoRpc{"NodeGetInfo"};

// A refused request's fields may be anything: none of them is logged.
constexpr std::string_view kInvalidVolume = "(invalid)";

// Runs `act` on a validated request; the answer names its volume.
template <typename Response, typename Spec, typename Act>
RpcAnswer<Response> ActOnValid(const std::expected<Spec, RequestError>& spec,
                               Act act) {
  if (!spec) {
    return {std::unexpected(spec.error().ToStatus()),
            std::string(kInvalidVolume)};
  }
  grpc::Status status = act(*spec);
  if (!status.ok()) {
    return {std::unexpected(std::move(status)), spec->volume_id};
  }
  return {Response{}, spec->volume_id};
}

}  // namespace

RpcAnswer<csi::v1::NodePublishVolumeResponse> HandleNodePublishVolume(
    const csi::v1::NodePublishVolumeRequest& request, Publisher& publisher,
    const ValidationPolicy& policy, ViewPublisher* views) {
  if (IsViewRequest(request)) {
    return ActOnValid<csi::v1::NodePublishVolumeResponse>(
        ValidateViewPublishRequest(request, policy),
        [&](const ViewPublishSpec& spec) {
          if (views == nullptr) return ViewNotServed(spec.view, {});
          return views->Publish(spec);
        });
  }
  return ActOnValid<csi::v1::NodePublishVolumeResponse>(
      ValidatePublishRequest(request, policy),
      [&](const PublishSpec& spec) { return publisher.Publish(spec); });
}

RpcAnswer<csi::v1::NodeUnpublishVolumeResponse> HandleNodeUnpublishVolume(
    const csi::v1::NodeUnpublishVolumeRequest& request, Publisher& publisher,
    const ValidationPolicy& policy, ViewPublisher* views) {
  return ActOnValid<csi::v1::NodeUnpublishVolumeResponse>(
      ValidateUnpublishRequest(request, policy),
      [&](const UnpublishSpec& spec) {
        if (views != nullptr) {
          if (grpc::Status unmounted = views->UnmountViews(spec);
              !unmounted.ok()) {
            return unmounted;
          }
        }
        return publisher.Unpublish(spec);
      });
}

csi::v1::NodeGetCapabilitiesResponse HandleNodeGetCapabilities() { return {}; }

csi::v1::NodeGetInfoResponse HandleNodeGetInfo(const std::string& node_id,
                                               uint32_t max_volumes_per_node) {
  csi::v1::NodeGetInfoResponse response;
  response.set_node_id(node_id);
  // kubelet writes it into CSINode's allocatable count for the driver.
  response.set_max_volumes_per_node(max_volumes_per_node);
  return response;
}

NodeService::NodeService(std::string node_id, Publisher& publisher,
                         RpcObserver* observer, ValidationPolicy policy,
                         ViewPublisher* views)
    : node_id_(std::move(node_id)),
      publisher_(publisher),
      observer_(observer),
      policy_(std::move(policy)),
      views_(views) {}

void NodeService::ServeOn(RpcServer& server) {
  using Async = csi::v1::Node::AsyncService;
  ServeUnary(server, service_, &Async::RequestNodePublishVolume, kPublishRpc,
             observer_, [this](const csi::v1::NodePublishVolumeRequest& r) {
               return HandleNodePublishVolume(r, publisher_, policy_, views_);
             });
  ServeUnary(server, service_, &Async::RequestNodeUnpublishVolume,
             kUnpublishRpc, observer_,
             [this](const csi::v1::NodeUnpublishVolumeRequest& r) {
               return HandleNodeUnpublishVolume(r, publisher_, policy_, views_);
             });
  ServeUnary(server, service_, &Async::RequestNodeGetCapabilities,
             kCapabilitiesRpc, observer_, HandleNodeGetCapabilities);
  ServeUnary(server, service_, &Async::RequestNodeGetInfo, kInfoRpc, observer_,
             [this] {
               return HandleNodeGetInfo(node_id_, publisher_.caps().per_node);
             });
  RefuseUnary(server, service_, &Async::RequestNodeStageVolume,
              {"NodeStageVolume"});
  RefuseUnary(server, service_, &Async::RequestNodeUnstageVolume,
              {"NodeUnstageVolume"});
  RefuseUnary(server, service_, &Async::RequestNodeGetVolumeStats,
              {"NodeGetVolumeStats"});
  RefuseUnary(server, service_, &Async::RequestNodeExpandVolume,
              {"NodeExpandVolume"});
}

}  // namespace fcc::driver
