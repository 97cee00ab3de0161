#include "driver/health_check.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "driver/registration_service.h"

namespace fcc::driver {

std::expected<SocketIdentity, std::string> IdentifySocket(
    const std::string& path) {
  struct stat st{};
  if (lstat(path.c_str(), &st) != 0) {
    return std::unexpected(path + ": " + std::strerror(errno));
  }
  if (!S_ISSOCK(st.st_mode)) return std::unexpected(path + " is not a socket");
  return SocketIdentity{st.st_dev, st.st_ino};
}

std::expected<void, std::string> CheckSocketIdentity(
    const std::string& path, const SocketIdentity& expected) {
  struct stat st{};
  if (lstat(path.c_str(), &st) != 0) {
    return std::unexpected("socket " + path + " is gone");
  }
  if (!S_ISSOCK(st.st_mode) || st.st_dev != expected.dev ||
      st.st_ino != expected.ino) {
    return std::unexpected("socket " + path + " was replaced");
  }
  return {};
}

std::expected<void, std::string> ProbeVerdict(
    const grpc::Status& status, const csi::v1::ProbeResponse& response) {
  if (!status.ok()) {
    return std::unexpected("CSI Probe failed: code " +
                           std::to_string(status.error_code()) + ": " +
                           status.error_message());
  }
  if (response.has_ready() && !response.ready().value()) {
    return std::unexpected("CSI Probe: not ready");
  }
  return {};
}

HealthCheck::HealthCheck(Options options) : options_(std::move(options)) {}

std::expected<void, std::string> HealthCheck::MarkServing() {
  auto csi = IdentifySocket(options_.csi_socket_path);
  if (!csi) return std::unexpected(csi.error());
  csi_socket_ = *csi;
  if (!options_.registration_socket_path.empty()) {
    auto reg = IdentifySocket(options_.registration_socket_path);
    if (!reg) return std::unexpected(reg.error());
    registration_socket_ = *reg;
  }
  grpc::ChannelArguments args;
  // A channel of its own, never shared with another in this process.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel =
      grpc::CreateCustomChannel("unix://" + options_.csi_socket_path,
                                grpc::InsecureChannelCredentials(), args);
  {
    std::lock_guard lock(mu_);
    stub_ = csi::v1::Identity::NewStub(channel);
  }
  serving_.store(true, std::memory_order_release);
  return {};
}

void HealthCheck::MarkStopping() {
  serving_.store(false, std::memory_order_release);
  std::lock_guard lock(mu_);
  stub_.reset();  // a probe in flight keeps its own reference
}

std::expected<void, std::string> HealthCheck::ProbeCsi() const {
  std::shared_ptr<csi::v1::Identity::Stub> stub;
  {
    std::lock_guard lock(mu_);
    stub = stub_;
  }
  if (!stub) return std::unexpected("not serving");
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       options_.probe_timeout);
  csi::v1::ProbeResponse response;
  const grpc::Status status =
      stub->Probe(&context, csi::v1::ProbeRequest(), &response);
  return ProbeVerdict(status, response);
}

std::expected<void, std::string> HealthCheck::Evaluate() const {
  if (!serving_.load(std::memory_order_acquire)) {
    return std::unexpected("not serving");
  }
  if (auto ok = CheckSocketIdentity(options_.csi_socket_path, csi_socket_);
      !ok) {
    return std::unexpected("CSI " + ok.error() + ": kubelet cannot connect");
  }
  if (auto ok = ProbeCsi(); !ok) return ok;
  if (options_.registration_socket_path.empty()) return {};
  if (auto ok = CheckSocketIdentity(options_.registration_socket_path,
                                    registration_socket_);
      !ok) {
    return std::unexpected("registration " + ok.error() +
                           ": kubelet unregisters the driver");
  }
  if (options_.registration) {
    if (auto failure = options_.registration->Failure()) {
      return std::unexpected("kubelet refused registration: " + *failure);
    }
  }
  return {};
}

std::expected<void, std::string> HealthCheck::Check() const {
  auto result = Evaluate();
  const bool healthy = result.has_value();
  if (last_healthy_.exchange(healthy) != healthy) {
    if (healthy) {
      spdlog::info("healthy again");
    } else {
      spdlog::warn("unhealthy: {}", result.error());
    }
  } else if (!healthy) {
    spdlog::debug("unhealthy: {}", result.error());
  }
  return result;
}

}  // namespace fcc::driver
