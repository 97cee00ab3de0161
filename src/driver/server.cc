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

#include "driver/http_server.h"
#include "driver/identity_service.h"
#include "driver/key_cache.h"
#include "driver/master_key.h"
#include "driver/metrics.h"
#include "driver/node_service.h"
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
std::expected<void, std::string> PrepareSocketPath(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) {
    return std::unexpected("cannot create the socket's directory: " +
                           ec.message());
  }
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return {};
  if (!S_ISSOCK(st.st_mode)) {
    return std::unexpected(path +
                           " exists and is not a socket; remove it or choose "
                           "another --endpoint");
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
  auto socket_path = SocketPathFromEndpoint(options.endpoint);
  if (!socket_path) {
    spdlog::error("{}", socket_path.error());
    return 2;
  }
  auto master_key = LoadMasterKey(options.master_key_file);
  if (!master_key) {
    spdlog::error("refusing to serve: {}", master_key.error());
    return 2;
  }
  if (auto prepared = PrepareSocketPath(*socket_path); !prepared) {
    spdlog::error("refusing to serve: {}", prepared.error());
    return 2;
  }

  // Signals are taken by sigwait below, not by handlers in random threads;
  // block them before gRPC starts its threads so they inherit the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  KeyCache keys(std::move(*master_key));
  LinuxHostFs host_fs(options.mount_api.value_or(DetectMountApi()));
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
  Publisher publisher(host_fs, keys, options.publisher);
  IdentityService identity;
  Metrics metrics(&keys);
  NodeService node(options.node_id, publisher, &metrics, options.validation);
  // /healthz is 200 only while the CSI socket is being served.
  std::atomic<bool> serving{false};
  std::unique_ptr<HttpServer> http;
  if (!options.metrics_address.empty()) {
    // Mounts matter more than metrics: a taken port is logged, not fatal
    // (the scrape target going down is what alerts).
    auto started = HttpServer::Start(options.metrics_address, metrics, serving);
    if (started) {
      http = std::move(*started);
      spdlog::info("metrics and /healthz on {} (port {})",
                   options.metrics_address, http->port());
    } else {
      spdlog::error("serving without metrics: {}", started.error());
    }
  }

  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + *socket_path,
                           grpc::InsecureServerCredentials());
  // Callback API: gRPC runs each handler on its own threads. The synchronous
  // server handed every call to a pool thread and, with more calls in flight
  // than its 2 pollers, started and ended threads as it went (strace of a
  // driver_bench c=8 run: 2,694 thread starts for ~6,100 RPCs).
  IdentityCallbackService identity_callback(identity);
  NodeCallbackService node_callback(node);
  builder.RegisterService(&identity_callback);
  builder.RegisterService(&node_callback);
  // Only root (kubelet) may connect: the socket is created 0600.
  const mode_t old_umask = umask(0077);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  umask(old_umask);
  if (!server) {
    spdlog::error("cannot listen on {}", *socket_path);
    return 1;
  }
  chmod(socket_path->c_str(), 0600);
  serving = true;
  spdlog::info("{} {} serving on {} for node {}", kDriverName, FCC_VERSION,
               *socket_path, options.node_id);

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  spdlog::info("received {}; finishing in-flight calls",
               strsignal(signal_number));
  serving = false;
  // In-flight publishes finish (each is seconds at worst); new calls are
  // refused. kubelet retries whatever was refused.
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(30));
  server->Wait();
  unlink(socket_path->c_str());
  spdlog::info("stopped");
  return 0;
}

}  // namespace fcc::driver
