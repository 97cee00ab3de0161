#include "driver/server.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include "common/http_server.h"
#include "common/signals.h"
#include "common/unique_fd.h"
#include "common/volume_contract.h"
#include "curve/secret.h"
#include "driver/health_check.h"
#include "driver/identity_service.h"
#include "driver/key_cache.h"
#include "driver/key_ring.h"
#include "driver/metrics.h"
#include "driver/node_service.h"
#include "driver/registration_service.h"
#include "driver/view/catalog.h"
#include "driver/view/publisher.h"
#include "driver/volume_count.h"

namespace fcc::driver {
namespace {

constexpr int kMaxRequestBytes = 64 * 1024;
constexpr int kMaxStreamsPerConnection = 64;

// True if something accepts connections on the socket at `path`.
bool SocketIsLive(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  common::UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
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

// mount(2) for tmpfs (asked for, or no fsopen) means mount(2) for views too,
// so the *_mount2 test passes cover the staged binds; otherwise whatever
// this kernel can seal detached.
ViewBindApi ChooseViewBindApi(const LinuxHostFs& host_fs,
                              const ServeOptions& options) {
  const ViewBindApi api = host_fs.api() == MountApi::kMount
                              ? ViewBindApi::kStaged
                              : DetectViewBindApi();
  if (api == ViewBindApi::kStaged) {
    spdlog::info(
        "binding view volumes with mount(2) from read-only staging binds in "
        "{}{}",
        options.view_staging_dir,
        host_fs.api() == MountApi::kMount
            ? ""
            : " (this kernel has no mount_setattr: Linux < 5.12)");
  } else {
    spdlog::info("binding view volumes with open_tree/mount_setattr");
  }
  return api;
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

std::expected<void, std::string> CheckNodeId(const std::string& node_id) {
  if (node_id.empty()) {
    return std::unexpected(
        "--node-id is empty: pass --node-id or set NODE_NAME (the DaemonSet "
        "sets it from spec.nodeName); kubelet unregisters a driver without "
        "one");
  }
  // CLI11 reads an empty "--node-id=" as a flag without its value and takes
  // the next argument instead (e.g. "--master-key-file=..."): refuse that.
  if (node_id.front() == '-') {
    return std::unexpected(fmt::format(
        "--node-id {:?} looks like a flag: was --node-id given an empty "
        "value? Set NODE_NAME or pass --node-id=<the Kubernetes node name>",
        node_id));
  }
  return {};
}

// What serving needs before anything starts: sound flags, the master key
// and free socket paths.
struct Prepared {
  SocketPaths paths;
  std::shared_ptr<KeyRing> keys;
};

std::expected<Prepared, std::string> Prepare(const ServeOptions& options) {
  if (auto ok = CheckNodeId(options.node_id); !ok) {
    return std::unexpected(ok.error());
  }
  auto paths = ResolveSocketPaths(options);
  if (!paths) return std::unexpected(paths.error());
  // With a directory, the file (which has a default) is not used.
  auto keys = KeyRing::Open(
      {.dir = options.master_key_dir,
       .file = options.master_key_dir.empty() ? options.master_key_file : "",
       .default_id = options.default_key_id});
  if (!keys) return std::unexpected("refusing to serve: " + keys.error());
  auto prepared = PrepareSocketPath(paths->csi, "--endpoint");
  if (prepared && !paths->registration.empty()) {
    prepared = PrepareSocketPath(paths->registration, "--registration-dir");
  }
  if (!prepared) {
    return std::unexpected("refusing to serve: " + prepared.error());
  }
  return Prepared{std::move(*paths), std::move(*keys)};
}

// The services the gRPC server serves, and the health check they feed.
struct Services {
  IdentityService& identity;
  NodeService& node;
  RegistrationService& registration;
  HealthCheck& health;
};

// One server for both sockets: its one thread then polls both, where two
// servers' threads would take turns at polling and hand calls to each other.
// The registration socket thus answers CSI calls too, and the CSI socket
// registration calls; both are root's alone (0600) all the same.
//
// CSI requests are a few KiB at most (a service-account token is the largest
// part), so a request is capped far below gRPC's 4 MiB default, and so are
// the calls one connection may have in flight: a confused or hostile client
// cannot make the driver buffer megabytes.
std::unique_ptr<RpcServer> StartServer(const SocketPaths& paths,
                                       const Services& services) {
  const bool registering = !paths.registration.empty();
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + paths.csi,
                           grpc::InsecureServerCredentials());
  if (registering) {
    builder.AddListeningPort("unix://" + paths.registration,
                             grpc::InsecureServerCredentials());
    builder.RegisterService(services.registration.service());
  }
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             kMaxStreamsPerConnection);
  builder.RegisterService(services.identity.service());
  builder.RegisterService(services.node.service());
  const mode_t old_umask = umask(0077);
  std::unique_ptr<RpcServer> server =
      RpcServer::Start(builder, [&](RpcServer& started) {
        services.identity.ServeOn(started);
        services.node.ServeOn(started);
        if (registering) services.registration.ServeOn(started);
      });
  umask(old_umask);
  return server;
}

void LogServing(const ServeOptions& options, const SocketPaths& paths) {
  spdlog::info("{} {} serving on {} for node {}", common::kDriverName,
               FCC_VERSION, paths.csi, options.node_id);
  if (paths.registration.empty()) return;
  spdlog::info(
      "registration socket {} for kubelet's plugin watcher (CSI endpoint "
      "on the host: {})",
      paths.registration, options.kubelet_registration_path);
}

// In-flight calls finish (a publish is milliseconds at worst); new calls are
// refused, and kubelet retries whatever was refused.
void StopServer(RpcServer& server, const SocketPaths& paths,
                HealthCheck& health) {
  health.MarkStopping();
  if (!paths.registration.empty()) {
    // Its removal is what makes kubelet unregister the driver: first, so
    // kubelet stops sending calls the server is about to refuse.
    unlink(paths.registration.c_str());
    spdlog::info("removed registration socket {}", paths.registration);
  }
  server.Stop(std::chrono::system_clock::now() + std::chrono::seconds(30));
  unlink(paths.csi.c_str());
}

// Serves until SIGTERM or SIGINT. Returns the process exit code.
int ServeUntilStopped(const ServeOptions& options, const SocketPaths& paths,
                      const Services& services, common::SignalWaiter& signals) {
  // Both sockets are served from the same moment: kubelet, which dials the
  // registration socket as soon as it appears, finds the CSI socket served.
  const std::unique_ptr<RpcServer> server = StartServer(paths, services);
  if (!server) {
    spdlog::error(
        "cannot listen on {}{}", paths.csi,
        paths.registration.empty() ? "" : " or " + paths.registration);
    return 1;
  }
  chmod(paths.csi.c_str(), 0600);
  if (!paths.registration.empty()) chmod(paths.registration.c_str(), 0600);
  LogServing(options, paths);
  if (auto marked = services.health.MarkServing(); !marked) {
    spdlog::error("/healthz stays unhealthy: {}", marked.error());
  }
  const int signal_number = signals.Wait();
  spdlog::info("received {}; finishing in-flight calls",
               strsignal(signal_number));
  StopServer(*server, paths, services.health);
  spdlog::info("stopped");
  return 0;
}

// Volumes mounted by an earlier driver process still hold memory in this
// cgroup: they count against the caps from the first call on.
std::expected<void, std::string> AdoptMountedVolumes(
    Publisher& publisher, const ServeOptions& options) {
  auto mounted = ScanDriverVolumes(options.validation.kubelet_dir);
  if (!mounted) {
    return std::unexpected(
        "refusing to serve: cannot count the volumes "
        "already mounted: " +
        mounted.error());
  }
  publisher.AdoptMounted(*mounted);
  const VolumeCount::Stats stats = publisher.CountStats();
  const VolumeCaps& caps = publisher.caps();
  spdlog::info(
      "{} volumes of {} pods already mounted; caps: {} per pod "
      "(--max-volumes-per-pod), {} per node (--max-volumes-per-node)",
      stats.volumes, stats.pods, caps.per_pod, caps.per_node);
  if (stats.volumes > caps.per_node) {
    spdlog::warn(
        "the node holds more volumes than --max-volumes-per-node={}: no "
        "publish of a new volume succeeds until {} are unpublished",
        caps.per_node, stats.volumes - caps.per_node + 1);
  }
  return {};
}

}  // namespace

int Serve(const ServeOptions& options) {
  auto prepared = Prepare(options);
  if (!prepared) {
    spdlog::error("{}", prepared.error());
    return 2;
  }
  const SocketPaths& paths = prepared->paths;
  // Before gRPC starts its threads, so that they inherit the signal mask.
  auto signals = common::SignalWaiter::Create();
  if (!signals) {
    spdlog::error("{}", signals.error());
    return 1;
  }

  KeyCache keys(std::move(prepared->keys));
  const std::unique_ptr<LinuxHostFs> host_fs =
      MakeLinuxHostFs(options.mount_api.value_or(DetectMountApi()));
  LogMountApi(*host_fs, options);
  Publisher publisher(*host_fs, keys, options.publisher);
  if (auto adopted = AdoptMountedVolumes(publisher, options); !adopted) {
    spdlog::error("{}", adopted.error());
    return 1;
  }
  // A view that cannot be installed costs that view only: certs are served
  // and its publishes name the cause (docs/admin/errors.md).
  const ViewCatalog views = InstallViews(
      options.views_dir, options.view_store_dir, options.view_store_lock_wait);
  for (const ViewFailure& failure : views.failures()) {
    spdlog::error(
        "Flux views unavailable: view {}: {}; certs are served, and publishes "
        "of this view fail until a driver restart finds the cause fixed",
        failure.name, failure.cause);
  }
  spdlog::info("serving Flux views: {} (from {}, node copy in {})",
               views.ServedNames(), options.views_dir, options.view_store_dir);
  LinuxViewBinder view_binder(*host_fs);
  ViewPublisher view_publisher(*host_fs, view_binder, views, publisher.count(),
                               {.api = ChooseViewBindApi(*host_fs, options),
                                .staging_dir = options.view_staging_dir});
  if (auto adopted =
          view_publisher.AdoptMounted(options.validation.kubelet_dir);
      !adopted) {
    spdlog::error(
        "refusing to serve: cannot count the view volumes already "
        "mounted: {}",
        adopted.error());
    return 1;
  } else if (*adopted > 0) {
    spdlog::info("{} view volumes already mounted", *adopted);
  }
  IdentityService identity;
  Metrics metrics(&keys, &publisher);
  NodeService node(options.node_id, publisher, &metrics, options.validation,
                   &view_publisher);
  RegistrationState registration;
  RegistrationService registration_service(
      MakePluginInfo(options.kubelet_registration_path), registration);
  HealthCheck health({.csi_socket_path = paths.csi,
                      .registration_socket_path = paths.registration,
                      .registration = &registration});
  std::unique_ptr<common::HttpServer> http =
      StartHttp(options, metrics, health);
  return ServeUntilStopped(
      options, paths, {identity, node, registration_service, health}, *signals);
}

}  // namespace fcc::driver
