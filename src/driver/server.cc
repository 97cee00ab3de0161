#include "driver/server.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include "common/http_server.h"
#include "driver/health_check.h"
#include "driver/identity_service.h"
#include "driver/key_cache.h"
#include "driver/master_key.h"
#include "driver/metrics.h"
#include "driver/node_service.h"
#include "driver/registration_service.h"
#include "driver/unique_fd.h"

namespace fcc::driver {
namespace {

// True if something accepts connections on the socket at `path`.
bool SocketIsLive(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  return fd && connect(fd.get(), reinterpret_cast<sockaddr*>(&addr),
                       sizeof(addr)) == 0;
}

// Makes way for our socket: removes a stale one left by a killed driver,
// refuses to remove a live one or anything that is not a socket.
std::expected<void, std::string> PrepareSocketPath(const std::string& path,
                                                   std::string_view flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) {
    return std::unexpected("cannot create the socket's directory: " +
                           ec.message());
  }
  struct stat st{};
  if (lstat(path.c_str(), &st) != 0) return {};
  if (!S_ISSOCK(st.st_mode)) {
    return std::unexpected(path +
                           " exists and is not a socket; remove it or choose "
                           "another " +
                           std::string(flag));
  }
  if (SocketIsLive(path)) {
    return std::unexpected("another process is serving on " + path +
                           "; stop it first (one driver per node)");
  }
  if (unlink(path.c_str()) != 0) {
    return std::unexpected("cannot remove the stale socket " + path + ": " +
                           std::strerror(errno));
  }
  spdlog::info("removed stale socket {}", path);
  return {};
}

}  // namespace

std::expected<std::string, std::string> SocketPathFromEndpoint(
    const std::string& endpoint) {
  std::string_view rest(endpoint);
  if (rest.starts_with("unix://")) {
    rest.remove_prefix(7);
  } else if (rest.starts_with("unix:")) {
    rest.remove_prefix(5);
  } else {
    return std::unexpected("--endpoint must be unix:///absolute/path/csi.sock");
  }
  if (rest.empty() || rest.front() != '/') {
    return std::unexpected(
        "--endpoint must name an absolute socket path "
        "(unix:///absolute/path/csi.sock)");
  }
  if (rest.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return std::unexpected("--endpoint socket path is longer than 107 bytes");
  }
  return std::string(rest);
}

namespace {

// Where the driver serves: the CSI socket and, when registering itself with
// kubelet, the registration socket.
struct SocketPaths {
  std::string csi;
  std::string registration;  // "" = not registering
};

std::expected<SocketPaths, std::string> ResolveSocketPaths(
    const ServeOptions& options) {
  auto csi = SocketPathFromEndpoint(options.endpoint);
  if (!csi) return std::unexpected(csi.error());
  SocketPaths paths{*csi, ""};
  if (options.registration_dir.empty()) return paths;
  // CLI11 gives an empty "--registration-dir=" the next argument instead.
  if (options.registration_dir.front() == '-') {
    return std::unexpected(
        "--registration-dir \"" + options.registration_dir +
        "\" looks like a flag: was --registration-dir given an empty value? "
        "Leave it out (or REGISTRATION_DIR unset) to not register");
  }
  if (auto ok = CheckKubeletRegistrationPath(options.kubelet_registration_path);
      !ok) {
    return std::unexpected(ok.error());
  }
  paths.registration = RegistrationSocketPath(options.registration_dir);
  if (paths.registration.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return std::unexpected("--registration-dir is too long: " +
                           paths.registration + " exceeds 107 bytes");
  }
  return paths;
}

// Starts a gRPC server on the unix socket `path`. Only root (kubelet) may
// connect: the socket is created 0600.
std::unique_ptr<grpc::Server> ServeUnixSocket(
    const std::string& path, std::initializer_list<grpc::Service*> services) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + path, grpc::InsecureServerCredentials());
  for (grpc::Service* service : services) builder.RegisterService(service);
  const mode_t old_umask = umask(0077);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  umask(old_umask);
  if (server) chmod(path.c_str(), 0600);
  return server;
}

// In-flight calls finish (a publish is seconds at worst); new calls are
// refused, and kubelet retries whatever was refused.
void StopServer(grpc::Server& server, const std::string& path,
                std::chrono::seconds grace) {
  server.Shutdown(std::chrono::system_clock::now() + grace);
  server.Wait();
  unlink(path.c_str());
}

void LogMountApi(const LinuxHostFs& host_fs, const ServeOptions& options) {
  if (host_fs.api() == MountApi::kMount) {
    spdlog::warn(
        "mounting volumes with mount(2){}: a driver killed mid-publish can "
        "leave a half-made volume, which the next publish repairs",
        options.mount_api ? " (--mount-api=mount)"
                          : ": this kernel has no fsopen (Linux < 5.2, or a "
                            "seccomp filter hides it)");
  } else {
    spdlog::info("mounting volumes with fsopen/fsmount/move_mount");
  }
}

// Mounts matter more than metrics: a taken port is logged, not fatal (the
// scrape target going down is what alerts).
std::unique_ptr<common::HttpServer> StartHttp(const ServeOptions& options,
                                              Metrics& metrics,
                                              const HealthCheck& health) {
  if (options.metrics_address.empty()) return nullptr;
  auto metrics_reply = [&metrics] {
    return common::HttpReply{200, metrics.Render(),
                             "text/plain; version=0.0.4"};
  };
  auto health_reply = [&health] {
    const auto healthy = health.Check();
    return healthy ? common::HttpReply{200, "ok\n"}
                   : common::HttpReply{503, healthy.error() + "\n"};
  };
  auto started = common::HttpServer::Start(
      "--metrics-address", options.metrics_address,
      {{"/metrics", metrics_reply}, {"/healthz", health_reply}});
  if (!started) {
    spdlog::error("serving without metrics: {}", started.error());
    return nullptr;
  }
  spdlog::info("metrics and /healthz on {} (port {})", options.metrics_address,
               (*started)->port());
  return std::move(*started);
}

int WaitForStopSignal(const sigset_t& stop_signals) {
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  return signal_number;
}

}  // namespace

int Serve(const ServeOptions& options) {
  if (options.node_id.empty()) {
    spdlog::error(
        "--node-id is empty: pass --node-id or set NODE_NAME (the DaemonSet "
        "sets it from spec.nodeName); kubelet unregisters a driver without "
        "one");
    return 2;
  }
  // CLI11 reads an empty "--node-id=" as a flag without its value and takes
  // the next argument instead (e.g. "--master-key-file=..."): refuse that.
  if (options.node_id.front() == '-') {
    spdlog::error(
        "--node-id {:?} looks like a flag: was --node-id given an empty "
        "value? Set NODE_NAME or pass --node-id=<the Kubernetes node name>",
        options.node_id);
    return 2;
  }
  auto paths = ResolveSocketPaths(options);
  if (!paths) {
    spdlog::error("{}", paths.error());
    return 2;
  }
  auto master_key = LoadMasterKey(options.master_key_file);
  if (!master_key) {
    spdlog::error("refusing to serve: {}", master_key.error());
    return 2;
  }
  if (auto prepared = PrepareSocketPath(paths->csi, "--endpoint"); !prepared) {
    spdlog::error("refusing to serve: {}", prepared.error());
    return 2;
  }
  if (!paths->registration.empty()) {
    auto prepared =
        PrepareSocketPath(paths->registration, "--registration-dir");
    if (!prepared) {
      spdlog::error("refusing to serve: {}", prepared.error());
      return 2;
    }
  }

  // Signals are taken by sigwait below, not by handlers in random threads;
  // block them before gRPC starts its threads so they inherit the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  KeyCache keys(std::move(*master_key));
  const std::unique_ptr<LinuxHostFs> host_fs =
      MakeLinuxHostFs(options.mount_api.value_or(DetectMountApi()));
  LogMountApi(*host_fs, options);
  Publisher publisher(*host_fs, keys, options.publisher);
  IdentityService identity;
  Metrics metrics(&keys);
  NodeService node(options.node_id, publisher, &metrics, options.validation);
  RegistrationState registration;
  HealthCheck health({.csi_socket_path = paths->csi,
                      .registration_socket_path = paths->registration,
                      .registration = &registration});
  std::unique_ptr<common::HttpServer> http =
      StartHttp(options, metrics, health);

  // Callback API: gRPC runs each handler on its own threads. The synchronous
  // server handed every call to a pool thread and, with more calls in flight
  // than its 2 pollers, started and ended threads as it went (strace of a
  // driver_bench c=8 run: 2,694 thread starts for ~6,100 RPCs).
  IdentityCallbackService identity_callback(identity);
  NodeCallbackService node_callback(node);
  std::unique_ptr<grpc::Server> server =
      ServeUnixSocket(paths->csi, {&identity_callback, &node_callback});
  if (!server) {
    spdlog::error("cannot listen on {}", paths->csi);
    return 1;
  }
  spdlog::info("{} {} serving on {} for node {}", kDriverName, FCC_VERSION,
               paths->csi, options.node_id);

  // kubelet calls NodeGetInfo on the CSI socket while it registers us, so
  // the registration socket appears only once CSI is served.
  RegistrationCallbackService registration_callback(
      MakePluginInfo(options.kubelet_registration_path), registration);
  std::unique_ptr<grpc::Server> registration_server;
  if (!paths->registration.empty()) {
    registration_server =
        ServeUnixSocket(paths->registration, {&registration_callback});
    if (!registration_server) {
      spdlog::error("cannot listen on {}", paths->registration);
      StopServer(*server, paths->csi, std::chrono::seconds(30));
      return 1;
    }
    spdlog::info(
        "registration socket {} for kubelet's plugin watcher (CSI endpoint "
        "on the host: {})",
        paths->registration, options.kubelet_registration_path);
  }
  if (auto marked = health.MarkServing(); !marked) {
    spdlog::error("/healthz stays unhealthy: {}", marked.error());
  }

  const int signal_number = WaitForStopSignal(stop_signals);
  spdlog::info("received {}; finishing in-flight calls",
               strsignal(signal_number));
  health.MarkStopping();
  if (registration_server) {
    // Its removal is what makes kubelet unregister the driver: first, so
    // kubelet stops sending calls the CSI server is about to refuse.
    unlink(paths->registration.c_str());
    spdlog::info("removed registration socket {}", paths->registration);
    StopServer(*registration_server, paths->registration,
               std::chrono::seconds(1));
  }
  StopServer(*server, paths->csi, std::chrono::seconds(30));
  spdlog::info("stopped");
  return 0;
}

}  // namespace fcc::driver
