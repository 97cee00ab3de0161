#include "driver/node_service.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "driver/volume_request.h"

namespace fcc::driver {
namespace {

// Logs the outcome of one RPC. Only validated, non-secret fields are logged:
// never the volume_context (it may carry service-account tokens) nor secrets.
void LogOutcome(std::string_view rpc, std::string_view volume_id,
                const grpc::Status& status,
                std::chrono::steady_clock::time_point start) {
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::steady_clock::now() - start)
                          .count();
  if (status.ok()) {
    spdlog::debug("{} volume {}: OK in {} us", rpc, volume_id, micros);
  } else {
    spdlog::warn("{} volume {}: code {} in {} us: {}", rpc, volume_id,
                 static_cast<int>(status.error_code()), micros,
                 status.error_message());
  }
}

}  // namespace

NodeService::NodeService(std::string node_id, Publisher& publisher,
                         Metrics* metrics, ValidationPolicy policy)
    : node_id_(std::move(node_id)),
      publisher_(publisher),
      metrics_(metrics),
      policy_(policy) {}

grpc::Status NodeService::NodePublishVolume(
    grpc::ServerContext*, const csi::v1::NodePublishVolumeRequest* request,
    csi::v1::NodePublishVolumeResponse*) {
  const auto start = std::chrono::steady_clock::now();
  auto spec = ValidatePublishRequest(*request, policy_);
  grpc::Status status =
      spec ? publisher_.Publish(*spec) : spec.error().ToStatus();
  LogOutcome("NodePublishVolume", spec ? spec->volume_id : "(invalid)", status,
             start);
  if (metrics_) {
    metrics_->ObservePublish(status.error_code(),
                             std::chrono::steady_clock::now() - start);
  }
  return status;
}

grpc::Status NodeService::NodeUnpublishVolume(
    grpc::ServerContext*, const csi::v1::NodeUnpublishVolumeRequest* request,
    csi::v1::NodeUnpublishVolumeResponse*) {
  const auto start = std::chrono::steady_clock::now();
  auto spec = ValidateUnpublishRequest(*request);
  grpc::Status status =
      spec ? publisher_.Unpublish(*spec) : spec.error().ToStatus();
  LogOutcome("NodeUnpublishVolume", spec ? spec->volume_id : "(invalid)",
             status, start);
  if (metrics_) {
    metrics_->ObserveUnpublish(status.error_code(),
                               std::chrono::steady_clock::now() - start);
  }
  return status;
}

grpc::Status NodeService::NodeGetCapabilities(
    grpc::ServerContext*, const csi::v1::NodeGetCapabilitiesRequest*,
    csi::v1::NodeGetCapabilitiesResponse*) {
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      grpc::Status status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(std::move(status));
  return reactor;
}

// The handlers never read their grpc::ServerContext (nothing in the call's
// metadata matters to the driver), so the callback services pass none.
grpc::ServerUnaryReactor* NodeCallbackService::NodePublishVolume(
    grpc::CallbackServerContext* context,
    const csi::v1::NodePublishVolumeRequest* request,
    csi::v1::NodePublishVolumeResponse* response) {
  return FinishUnary(context,
                     node_.NodePublishVolume(nullptr, request, response));
}

grpc::ServerUnaryReactor* NodeCallbackService::NodeUnpublishVolume(
    grpc::CallbackServerContext* context,
    const csi::v1::NodeUnpublishVolumeRequest* request,
    csi::v1::NodeUnpublishVolumeResponse* response) {
  return FinishUnary(context,
                     node_.NodeUnpublishVolume(nullptr, request, response));
}

grpc::ServerUnaryReactor* NodeCallbackService::NodeGetCapabilities(
    grpc::CallbackServerContext* context,
    const csi::v1::NodeGetCapabilitiesRequest* request,
    csi::v1::NodeGetCapabilitiesResponse* response) {
  return FinishUnary(context,
                     node_.NodeGetCapabilities(nullptr, request, response));
}

grpc::ServerUnaryReactor* NodeCallbackService::NodeGetInfo(
    grpc::CallbackServerContext* context,
    const csi::v1::NodeGetInfoRequest* request,
    csi::v1::NodeGetInfoResponse* response) {
  return FinishUnary(context, node_.NodeGetInfo(nullptr, request, response));
}

grpc::Status NodeService::NodeGetInfo(grpc::ServerContext*,
                                      const csi::v1::NodeGetInfoRequest*,
                                      csi::v1::NodeGetInfoResponse* response) {
  response->set_node_id(node_id_);
  return grpc::Status::OK;
}

}  // namespace fcc::driver
