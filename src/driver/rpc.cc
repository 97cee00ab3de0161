#include "driver/rpc.h"

#include <grpcpp/server_context.h>
#include <spdlog/spdlog.h>

namespace fcc::driver {
namespace {

// Only validated, non-secret fields are logged: never the volume_context (it
// may carry service-account tokens) nor secrets.
void LogOutcome(std::string_view rpc, std::string_view volume,
                const grpc::Status& status,
                std::chrono::steady_clock::duration elapsed) {
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count();
  const std::string call = volume.empty()
                               ? std::string(rpc)
                               : fmt::format("{} volume {}", rpc, volume);
  if (status.ok()) {
    if (!volume.empty()) spdlog::debug("{}: OK in {} us", call, micros);
  } else {
    spdlog::warn("{}: code {} in {} us: {}", call,
                 static_cast<int>(status.error_code()), micros,
                 status.error_message());
  }
}

}  // namespace

grpc::Status InternalStatus(std::string_view why) {
  return grpc::Status(grpc::StatusCode::INTERNAL,
                      fmt::format("internal error: {}", why));
}

grpc::ServerUnaryReactor* FinishRpc(
    grpc::CallbackServerContext* context, const RpcKind& rpc, Metrics* metrics,
    std::string_view volume, grpc::Status status,
    std::chrono::steady_clock::time_point start) {
  const auto elapsed = std::chrono::steady_clock::now() - start;
  LogOutcome(rpc.name, volume, status, elapsed);
  if (metrics != nullptr && rpc.observe != nullptr) {
    (metrics->*rpc.observe)(status.error_code(), elapsed);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(std::move(status));
  return reactor;
}

}  // namespace fcc::driver
