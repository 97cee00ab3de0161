#include "driver/node_service.h"

namespace fcc::driver {
namespace {

constexpr RpcKind kPublishRpc{"NodePublishVolume", &Metrics::ObservePublish};
constexpr RpcKind kUnpublishRpc{"NodeUnpublishVolume",
                                &Metrics::ObserveUnpublish};
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
    const ValidationPolicy& policy) {
  return ActOnValid<csi::v1::NodePublishVolumeResponse>(
      ValidatePublishRequest(request, policy),
      [&](const PublishSpec& spec) { return publisher.Publish(spec); });
}

RpcAnswer<csi::v1::NodeUnpublishVolumeResponse> HandleNodeUnpublishVolume(
    const csi::v1::NodeUnpublishVolumeRequest& request, Publisher& publisher,
    const ValidationPolicy& policy) {
  return ActOnValid<csi::v1::NodeUnpublishVolumeResponse>(
      ValidateUnpublishRequest(request, policy),
      [&](const UnpublishSpec& spec) { return publisher.Unpublish(spec); });
}

csi::v1::NodeGetCapabilitiesResponse HandleNodeGetCapabilities() { return {}; }

csi::v1::NodeGetInfoResponse HandleNodeGetInfo(const std::string& node_id) {
  csi::v1::NodeGetInfoResponse response;
  response.set_node_id(node_id);
  return response;
}

NodeService::NodeService(std::string node_id, Publisher& publisher,
                         Metrics* metrics, ValidationPolicy policy)
    : node_id_(std::move(node_id)),
      publisher_(publisher),
      metrics_(metrics),
      policy_(std::move(policy)) {}

grpc::ServerUnaryReactor* NodeService::NodePublishVolume(
    grpc::CallbackServerContext* context,
    const csi::v1::NodePublishVolumeRequest* request,
    csi::v1::NodePublishVolumeResponse* response) {
  return ServeRpc(context, kPublishRpc, metrics_, response, [&] {
    return HandleNodePublishVolume(*request, publisher_, policy_);
  });
}

grpc::ServerUnaryReactor* NodeService::NodeUnpublishVolume(
    grpc::CallbackServerContext* context,
    const csi::v1::NodeUnpublishVolumeRequest* request,
    csi::v1::NodeUnpublishVolumeResponse* response) {
  return ServeRpc(context, kUnpublishRpc, metrics_, response, [&] {
    return HandleNodeUnpublishVolume(*request, publisher_, policy_);
  });
}

grpc::ServerUnaryReactor* NodeService::NodeGetCapabilities(
    grpc::CallbackServerContext* context,
    const csi::v1::NodeGetCapabilitiesRequest*,
    csi::v1::NodeGetCapabilitiesResponse* response) {
  return ServeRpc(context, kCapabilitiesRpc, metrics_, response,
                  HandleNodeGetCapabilities);
}

grpc::ServerUnaryReactor* NodeService::NodeGetInfo(
    grpc::CallbackServerContext* context, const csi::v1::NodeGetInfoRequest*,
    csi::v1::NodeGetInfoResponse* response) {
  return ServeRpc(context, kInfoRpc, metrics_, response,
                  [this] { return HandleNodeGetInfo(node_id_); });
}

}  // namespace fcc::driver
