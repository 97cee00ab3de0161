#include "driver/rpc.h"

#include <spdlog/spdlog.h>

#include "common/volume_contract.h"

namespace fcc::driver {

grpc::Status InternalStatus(std::string_view why) {
  return grpc::Status(grpc::StatusCode::INTERNAL,
                      fmt::format("internal error: {}", why));
}

grpc::Status UnimplementedStatus(std::string_view rpc) {
  return grpc::Status(
      grpc::StatusCode::UNIMPLEMENTED,
      fmt::format("{} does not implement {}", common::kDriverName, rpc));
}

namespace {

// "<rpc>" or "<rpc> volume <id>": formatted only when a line is written.
struct CallName {
  std::string_view rpc;
  std::string_view volume;
};

}  // namespace
}  // namespace fcc::driver

template <>
struct fmt::formatter<fcc::driver::CallName>
    : fmt::formatter<std::string_view> {
  auto format(const fcc::driver::CallName& call, format_context& ctx) const {
    if (call.volume.empty()) return fmt::format_to(ctx.out(), "{}", call.rpc);
    return fmt::format_to(ctx.out(), "{} volume {}", call.rpc, call.volume);
  }
};

namespace fcc::driver {

// Only validated, non-secret fields are logged: never the volume_context (it
// may carry service-account tokens) nor secrets.
void RecordRpc(const RpcKind& rpc, RpcObserver* observer,
               std::string_view volume, const grpc::Status& status,
               std::chrono::steady_clock::duration elapsed) {
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count();
  const CallName call{rpc.name, volume};
  if (!status.ok()) {
    spdlog::warn("{}: code {} in {} us: {}", call,
                 static_cast<int>(status.error_code()), micros,
                 status.error_message());
  } else if (!volume.empty()) {
    spdlog::debug("{}: OK in {} us", call, micros);
  }
  if (observer != nullptr && rpc.counted != CountedRpc::kNone) {
    observer->ObserveRpc(rpc.counted, status.error_code(), elapsed);
  }
}

std::unique_ptr<RpcServer> RpcServer::Start(
    grpc::ServerBuilder& builder,
    const std::function<void(RpcServer&)>& serve) {
  std::unique_ptr<grpc::ServerCompletionQueue> queue =
      builder.AddCompletionQueue();
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) return nullptr;
  std::unique_ptr<RpcServer> rpc(
      new RpcServer(std::move(server), std::move(queue)));
  serve(*rpc);
  rpc->thread_ = std::thread([raw = rpc.get()] { raw->Run(); });
  return rpc;
}

RpcServer::~RpcServer() { Stop(std::chrono::system_clock::now()); }

void RpcServer::Run() {
  void* tag = nullptr;
  bool ok = false;
  while (queue_->Next(&tag, &ok)) static_cast<CallStep*>(tag)->Proceed(ok);
}

// An await made while the server shuts down fails at once, so the queue is
// shut down only after the server's shutdown has returned: by then every
// call has been answered and no handler runs to await again.
void RpcServer::Stop(std::chrono::system_clock::time_point deadline) {
  if (stopped_) return;
  stopped_ = true;
  server_->Shutdown(deadline);
  queue_->Shutdown();
  thread_.join();
}

}  // namespace fcc::driver
