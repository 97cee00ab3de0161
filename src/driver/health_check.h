// The answer behind /healthz (the DaemonSet's liveness probe): is kubelet
// able to use this driver right now?
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <expected>
#include <memory>
#include <mutex>
#include <string>

#include "csi.grpc.pb.h"

namespace fcc::driver {

class RegistrationState;

// Which file a socket path named when we created it.
struct SocketIdentity {
  dev_t dev = 0;
  ino_t ino = 0;
};
std::expected<SocketIdentity, std::string> IdentifySocket(
    const std::string& path);
// Fails unless `path` is still the socket we created: kubelet connects anew
// for every call, so an unlinked or replaced socket file makes the driver
// unreachable even while its listener and old connections still work.
std::expected<void, std::string> CheckSocketIdentity(
    const std::string& path, const SocketIdentity& expected);

// A CSI Probe result: ready unless the RPC failed or ready is false (unset
// means ready, per the CSI spec).
std::expected<void, std::string> ProbeVerdict(
    const grpc::Status& status, const csi::v1::ProbeResponse& response);

class HealthCheck {
 public:
  struct Options {
    std::string csi_socket_path;
    std::string registration_socket_path;  // "" = not registering
    const RegistrationState* registration = nullptr;
    std::chrono::milliseconds probe_timeout{1000};
  };
  explicit HealthCheck(Options options);

  // Call once the sockets are served: remembers which files are ours and
  // opens the probe channel.
  std::expected<void, std::string> MarkServing();
  // Unhealthy from now on; drops the probe channel to the server being
  // stopped.
  void MarkStopping();

  // Healthy, or a short reason. Safe from any thread.
  std::expected<void, std::string> Check() const;

 private:
  std::expected<void, std::string> Evaluate() const;
  std::expected<void, std::string> ProbeCsi() const;

  const Options options_;
  SocketIdentity csi_socket_;
  SocketIdentity registration_socket_;
  mutable std::mutex mu_;  // guards stub_
  std::shared_ptr<csi::v1::Identity::Stub> stub_;
  std::atomic<bool> serving_{false};
  // Only changes are logged, not every probe.
  mutable std::atomic<bool> last_healthy_{true};
};

}  // namespace fcc::driver
