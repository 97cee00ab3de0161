// The one path every CSI and registration RPC takes: await the call on the
// server's completion queue, run the handler, turn an exception into
// INTERNAL, time, log and count the call once, answer it.
//
// The driver serves on gRPC's asynchronous API with one completion queue and
// the one thread that drains it: that thread polls the sockets, runs the
// handler and writes the answer, so a call costs no hand-off between
// threads. gRPC's callback API hands every call from a polling thread to
// another one (docs/internals/performance.md has the profile). The handlers do
// only bounded work (a few syscalls, at most one key derivation).
#pragma once

#include <grpcpp/completion_queue.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/async_unary_call.h>
#include <grpcpp/support/status.h>

#include <chrono>
#include <exception>
#include <expected>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>

namespace fcc::driver {

// A handler's answer: the response, or the status the call fails with; and,
// for the log line, the validated volume the call was about ("" for none).
template <typename Response>
struct RpcAnswer {
  std::expected<Response, grpc::Status> result;
  std::string volume;
};

// The RPCs whose outcomes are counted (the driver's metrics).
enum class CountedRpc { kNone, kPublish, kUnpublish };

// How one RPC is logged and counted.
struct RpcKind {
  std::string_view name;  // the log's <rpc>
  CountedRpc counted = CountedRpc::kNone;
};

// Hears of every finished call of a counted RPC: the driver's Metrics, as
// the controller's hears of requests and reconciles.
class RpcObserver {
 public:
  virtual ~RpcObserver() = default;
  virtual void ObserveRpc(CountedRpc rpc, grpc::StatusCode code,
                          std::chrono::steady_clock::duration elapsed) = 0;
};

// The status for an exception that escaped a handler: `why` is its what(),
// which in this code base never holds key material.
grpc::Status InternalStatus(std::string_view why);

// The answer to an RPC this driver does not serve (it advertises none of
// them).
grpc::Status UnimplementedStatus(std::string_view rpc);

// Logs and counts a finished call. Every failure is logged; a success only at
// debug level, and only for a call about a volume (/healthz calls
// Identity.Probe on every check).
void RecordRpc(const RpcKind& rpc, RpcObserver* observer,
               std::string_view volume, const grpc::Status& status,
               std::chrono::steady_clock::duration elapsed);

// One step of one call, as the completion queue hands it back (gRPC's tag).
class CallStep {
 public:
  virtual ~CallStep() = default;
  // `ok` is false when the step failed: the server is shutting down.
  virtual void Proceed(bool ok) = 0;
};

// A started grpc::Server, its one completion queue and the thread that
// serves it. Stops in the order gRPC requires: the server's shutdown first
// (in-flight calls are answered meanwhile; awaits fail), then the queue's.
class RpcServer final {
 public:
  // Builds and starts `builder`'s server; `serve` then awaits the first call
  // of each method. Null if the server cannot start (e.g. cannot listen).
  static std::unique_ptr<RpcServer> Start(
      grpc::ServerBuilder& builder,
      const std::function<void(RpcServer&)>& serve);
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;
  ~RpcServer();

  grpc::Server& server() { return *server_; }
  grpc::ServerCompletionQueue* queue() { return queue_.get(); }

  // Refuses new calls and gives in-flight ones until `deadline`.
  void Stop(std::chrono::system_clock::time_point deadline);

 private:
  RpcServer(std::unique_ptr<grpc::Server> server,
            std::unique_ptr<grpc::ServerCompletionQueue> queue)
      : server_(std::move(server)), queue_(std::move(queue)) {}
  void Run();

  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::ServerCompletionQueue> queue_;
  std::thread thread_;
  bool stopped_ = false;
};

// The generated AsyncService's Request<Method> member.
template <typename Service, typename Request, typename Response>
using RequestMethod = void (Service::*)(
    grpc::ServerContext*, Request*, grpc::ServerAsyncResponseWriter<Response>*,
    grpc::CompletionQueue*, grpc::ServerCompletionQueue*, void*);

// How one unary method is served. Shared by its calls.
template <typename Service, typename Request, typename Response>
struct UnaryMethod {
  Service* service;
  RequestMethod<Service, Request, Response> request;
  RpcKind kind;
  RpcObserver* observer;  // may be null
  std::function<RpcAnswer<Response>(const Request&)> handler;
};

// One call of a unary method: awaited, answered, deleted. An answered call
// first awaits the method's next call, so one call is always awaited.
template <typename Service, typename Request, typename Response>
class UnaryCall final : public CallStep {
 public:
  using Method = UnaryMethod<Service, Request, Response>;

  static void Await(std::shared_ptr<const Method> method, RpcServer& server) {
    auto* call = new UnaryCall(std::move(method), server);
    (call->method_->service->*call->method_->request)(
        &call->context_, &call->request_, &call->writer_, server.queue(),
        server.queue(), call);
  }

  void Proceed(bool ok) override {
    if (!ok || answered_) {
      delete this;
      return;
    }
    answered_ = true;
    Await(method_, server_);
    Answer();
  }

 private:
  UnaryCall(std::shared_ptr<const Method> method, RpcServer& server)
      : method_(std::move(method)), server_(server), writer_(&context_) {}

  RpcAnswer<Response> RunHandler() const {
    try {
      return method_->handler(request_);
    } catch (const std::exception& e) {
      return {std::unexpected(InternalStatus(e.what())), ""};
    } catch (...) {
      return {std::unexpected(InternalStatus("unknown error")), ""};
    }
  }

  void Answer() {
    const auto start = std::chrono::steady_clock::now();
    RpcAnswer<Response> answer = RunHandler();
    const grpc::Status status =
        answer.result ? grpc::Status::OK : answer.result.error();
    RecordRpc(method_->kind, method_->observer, answer.volume, status,
              std::chrono::steady_clock::now() - start);
    if (answer.result) {
      writer_.Finish(*answer.result, status, this);
    } else {
      writer_.FinishWithError(status, this);
    }
  }

  const std::shared_ptr<const Method> method_;
  RpcServer& server_;
  grpc::ServerContext context_;
  Request request_;
  grpc::ServerAsyncResponseWriter<Response> writer_;
  bool answered_ = false;
};

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

// Serves `request`'s method of `service` on `server` with `handler`: a
// function of the request, or of nothing, that returns a Response (it cannot
// fail) or an RpcAnswer<Response>. The server must have started.
template <typename Service, typename Request, typename Response,
          typename Handler>
void ServeUnary(RpcServer& server, std::type_identity_t<Service>& service,
                RequestMethod<Service, Request, Response> request,
                const RpcKind& kind, RpcObserver* observer, Handler handler) {
  auto method = std::make_shared<UnaryMethod<Service, Request, Response>>(
      &service, request, kind, observer,
      [handler = std::move(handler)](const Request& r) {
        if constexpr (std::is_invocable_v<Handler, const Request&>) {
          return internal::ToAnswer<Response>(handler(r));
        } else {
          return internal::ToAnswer<Response>(handler());
        }
      });
  UnaryCall<Service, Request, Response>::Await(std::move(method), server);
}

// Answers every call of `request`'s method with UNIMPLEMENTED.
template <typename Service, typename Request, typename Response>
void RefuseUnary(RpcServer& server, std::type_identity_t<Service>& service,
                 RequestMethod<Service, Request, Response> request,
                 const RpcKind& kind) {
  ServeUnary(server, service, request, kind, nullptr, [name = kind.name] {
    return RpcAnswer<Response>{std::unexpected(UnimplementedStatus(name)), ""};
  });
}

}  // namespace fcc::driver
