// The one path every CSI and registration RPC takes: run the handler, turn
// an exception into INTERNAL, then time, log and count the call once.
#pragma once

#include <grpcpp/support/server_callback.h>
#include <grpcpp/support/status.h>

#include <chrono>
#include <exception>
#include <expected>
#include <string>
#include <string_view>
#include <utility>

#include "driver/metrics.h"

namespace fcc::driver {

// A handler's answer: the response, or the status the call fails with; and,
// for the log line, the validated volume the call was about ("" for none).
template <typename Response>
struct RpcAnswer {
  std::expected<Response, grpc::Status> result;
  std::string volume;
};

// How one RPC is logged and counted.
struct RpcKind {
  std::string_view name;  // the log's <rpc>
  // Where its outcome is counted; null for RPCs without metrics.
  void (Metrics::*observe)(grpc::StatusCode,
                           std::chrono::steady_clock::duration) = nullptr;
};

// The status for an exception that escaped a handler: `why` is its what(),
// which in this code base never holds key material.
grpc::Status InternalStatus(std::string_view why);

// Logs and counts the finished call, then answers it with `status`. Every
// failure is logged; a success only at debug level, and only for a call about
// a volume (/healthz calls Identity.Probe on every check).
grpc::ServerUnaryReactor* FinishRpc(
    grpc::CallbackServerContext* context, const RpcKind& rpc, Metrics* metrics,
    std::string_view volume, grpc::Status status,
    std::chrono::steady_clock::time_point start);

namespace internal {

template <typename Response>
RpcAnswer<Response> ToAnswer(Response response) {
  return {std::move(response), ""};
}
template <typename Response>
RpcAnswer<Response> ToAnswer(RpcAnswer<Response> answer) {
  return answer;
}

}  // namespace internal

// Serves one unary call with `handler`, which returns a Response (it cannot
// fail) or an RpcAnswer<Response>. `metrics` may be null.
template <typename Response, typename Handler>
grpc::ServerUnaryReactor* ServeRpc(grpc::CallbackServerContext* context,
                                   const RpcKind& rpc, Metrics* metrics,
                                   Response* response, Handler&& handler) {
  const auto start = std::chrono::steady_clock::now();
  RpcAnswer<Response> answer;
  try {
    answer = internal::ToAnswer<Response>(std::forward<Handler>(handler)());
  } catch (const std::exception& e) {
    answer.result = std::unexpected(InternalStatus(e.what()));
  } catch (...) {
    answer.result = std::unexpected(InternalStatus("unknown error"));
  }
  if (!answer.result) {
    return FinishRpc(context, rpc, metrics, answer.volume,
                     std::move(answer.result.error()), start);
  }
  *response = std::move(*answer.result);
  return FinishRpc(context, rpc, metrics, answer.volume, grpc::Status::OK,
                   start);
}

}  // namespace fcc::driver
