// flux-curve-csi: the node plugin (serve) and its debugging subcommands.
#include <absl/synchronization/mutex.h>
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <expected>
#include <iostream>

#include "common/logging.h"
#include "common/names.h"
#include "curve/cert.h"
#include "curve/cert_file.h"
#include "curve/minicluster_cert.h"
#include "driver/host_fs.h"
#include "driver/key_ring.h"
#include "driver/master_key.h"
#include "driver/registration_service.h"
#include "driver/server.h"
#include "driver/volume_request.h"

namespace {

using namespace fcc;

// Settings for the long-running node daemon, before gRPC starts threads.
void TuneForServing() {
  // Debian builds abseil without NDEBUG, so every absl::Mutex lock inside
  // gRPC would run deadlock detection: a global spinlock and a graph update
  // per lock (docs/internals/performance.md, "What was changed in the driver").
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // One malloc arena: glibc gives each gRPC thread its own, and each keeps
  // freed heap after a burst of publishes; the driver allocates little per
  // call, so sharing one costs nothing (docs/internals/performance.md, same
  // table).
  mallopt(M_ARENA_MAX, 1);
  // The process holds the master key: no core dump may carry it to disk,
  // and no same-uid process may ptrace it.
  prctl(PR_SET_DUMPABLE, 0);
  const rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
}

// "user:role:type:level", the level possibly "s0:c1,c2".
bool IsSelinuxContext(std::string_view label) {
  return !label.empty() && label.size() <= 255 &&
         std::ranges::count(label, ':') >= 3 &&
         std::ranges::all_of(label, [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) ||
                  std::string_view("_.:,-").find(c) != std::string_view::npos;
         });
}

// What this kernel's tmpfs can do for the volumes: noswap wherever it is
// supported; an asked-for SELinux context or a refusal to serve.
std::expected<void, std::string> ChooseTmpfsOptions(
    driver::PublisherOptions& publisher) {
  publisher.noswap = !driver::ProbeTmpfsParameter("noswap", "");
  if (publisher.selinux_context.empty()) return {};
  if (!IsSelinuxContext(publisher.selinux_context)) {
    return std::unexpected(
        "--selinux-mount-context must be an SELinux label user:role:type:level"
        ", e.g. system_u:object_r:container_file_t:s0");
  }
  if (auto ec =
          driver::ProbeTmpfsParameter("context", publisher.selinux_context)) {
    return std::unexpected(
        "--selinux-mount-context: this kernel's tmpfs refuses context=" +
        publisher.selinux_context + " (" + ec.message() +
        "; SELinux disabled or the label unknown); leave the flag out on "
        "nodes without SELinux");
  }
  return {};
}

struct CertArgs {
  std::string master_key_dir;
  std::string master_key_file;
  std::string key_id;
  std::string namespace_name;
  std::string minicluster;
  std::string generation;
  bool public_only = false;
};

// The key a cert is made from: --key-id's file in --master-key-dir, or
// --master-key-file (which is the default key).
std::expected<curve::Secret, std::string> LoadCertKey(const CertArgs& args) {
  if (args.master_key_dir.empty()) {
    if (!args.key_id.empty()) {
      return std::unexpected(
          "--key-id names a key in --master-key-dir: pass --master-key-dir "
          "(a copy of the master key Secret's files) instead of "
          "--master-key-file");
    }
    if (args.master_key_file.empty()) {
      return std::unexpected(
          "pass --master-key-dir (with --key-id) or --master-key-file");
    }
    return driver::LoadMasterKey(args.master_key_file);
  }
  const std::string id =
      args.key_id.empty() ? std::string(driver::kDefaultKeyId) : args.key_id;
  if (auto ok = driver::CheckKeyId(id, "--key-id"); !ok) {
    return std::unexpected(ok.error());
  }
  return driver::LoadMasterKey(args.master_key_dir + "/" + id +
                               std::string(driver::kKeyFileSuffix));
}

int PrintCert(const CertArgs& args) {
  if (!common::IsDns1123Label(args.namespace_name)) {
    std::cerr << "--namespace must be a namespace name (DNS-1123 label)\n";
    return 2;
  }
  if (!common::IsDns1123Subdomain(args.minicluster)) {
    std::cerr << "--minicluster must be a MiniCluster name (DNS-1123 "
                 "subdomain)\n";
    return 2;
  }
  auto master_key = LoadCertKey(args);
  if (!master_key) {
    std::cerr << master_key.error() << "\n";
    return 2;
  }
  const curve::MiniClusterCert cert = curve::MakeMiniClusterCert(
      *master_key, {args.namespace_name, args.minicluster, args.generation});
  if (args.public_only) {
    std::cout << cert.public_z85 << "\n";
  } else {
    std::fwrite(cert.text.reveal().data(), 1, cert.text.size(), stdout);
  }
  return 0;
}

struct VerifyArgs {
  std::string file;
  std::string expect_public;
  std::string expect_name;
};

int VerifyCert(const VerifyArgs& args) {
  auto cert = curve::LoadCertFile(args.file);
  if (!cert) {
    std::cerr << "INVALID " << cert.error() << "\n";
    return 1;
  }
  const auto name = cert->metadata.find("name");
  const std::string name_text =
      name == cert->metadata.end() ? "" : name->second;
  if (!args.expect_public.empty() &&
      args.expect_public != cert->keys.public_z85) {
    std::cerr << "MISMATCH " << args.file << ": public-key "
              << cert->keys.public_z85 << " is not the expected "
              << args.expect_public << "\n";
    return 1;
  }
  if (!args.expect_name.empty() && args.expect_name != name_text) {
    std::cerr << "MISMATCH " << args.file << ": metadata name \"" << name_text
              << "\" is not the expected \"" << args.expect_name << "\"\n";
    return 1;
  }
  std::cout << "OK " << args.file << ": name=\"" << name_text
            << "\" public-key=" << cert->keys.public_z85 << "\n";
  return 0;
}

// The DaemonSet's paths and addresses; each also comes from the
// environment.
void AddServeFlags(CLI::App& serve_cmd, driver::ServeOptions& serve) {
  serve_cmd
      .add_option("--endpoint", serve.endpoint,
                  "CSI endpoint, unix:///path/csi.sock; created 0600")
      ->envname("CSI_ENDPOINT")
      ->capture_default_str();
  serve_cmd
      .add_option("--node-id", serve.node_id,
                  "Node ID for NodeGetInfo (the Kubernetes node name)")
      ->envname("NODE_NAME");
  serve_cmd
      .add_option("--master-key-dir", serve.master_key_dir,
                  "The master key Secret's volume: one <key-id>.key per key "
                  "(>= 32 bytes, mode 0400/0600), reloaded when kubelet "
                  "updates it; overrides --master-key-file")
      ->envname("MASTER_KEY_DIR");
  serve_cmd
      .add_option("--master-key-file", serve.master_key_file,
                  "One master key file, used as the default key (>= 32 "
                  "bytes, mode 0400/0600); without --master-key-dir")
      ->envname("MASTER_KEY_FILE")
      ->capture_default_str();
  serve_cmd
      .add_option("--default-key-id", serve.default_key_id,
                  "The key of volumes without volumeAttributes.key-id (all "
                  "MiniClusters made before key rotation, flux-operator's)")
      ->envname("DEFAULT_KEY_ID")
      ->capture_default_str();
  serve_cmd
      .add_option("--metrics-address", serve.metrics_address,
                  "host:port serving Prometheus /metrics and /healthz; "
                  "empty disables")
      ->envname("METRICS_ADDRESS")
      ->capture_default_str();
  serve_cmd
      .add_option("--registration-dir", serve.registration_dir,
                  "kubelet's plugin registration directory as mounted here "
                  "(host /var/lib/kubelet/plugins_registry): serve "
                  "curve.minicluster.dev-reg.sock there so kubelet registers "
                  "the driver without node-driver-registrar; empty disables")
      ->envname("REGISTRATION_DIR");
  serve_cmd
      .add_option("--kubelet-registration-path",
                  serve.kubelet_registration_path,
                  "The CSI socket's path on the host, as kubelet dials it "
                  "(told to kubelet when registering)")
      ->envname("KUBELET_REGISTRATION_PATH")
      ->capture_default_str();
  serve_cmd
      .add_option("--views-dir", serve.views_dir,
                  "The Flux views this driver serves as view volumes, one "
                  "directory each (the image's); empty or missing: none")
      ->envname("VIEWS_DIR")
      ->capture_default_str();
  serve_cmd
      .add_option("--view-store-dir", serve.view_store_dir,
                  "Where the node keeps its copy of each view, which pods "
                  "bind: a host directory, so that mounted views outlive the "
                  "driver's container")
      ->envname("VIEW_STORE_DIR")
      ->capture_default_str();
  serve_cmd
      .add_option("--view-staging-dir", serve.view_staging_dir,
                  "Where view volumes are staged read-only on kernels "
                  "without mount_setattr (Linux < 5.12) or with "
                  "--mount-api=mount: a directory in the driver's own mount "
                  "namespace, which it makes a private mount")
      ->envname("VIEW_STAGING_DIR")
      ->capture_default_str();
  serve_cmd
      .add_option_function<int>(
          "--view-store-lock-seconds",
          [&serve](int s) {
            serve.view_store_lock_wait = std::chrono::seconds(s);
          },
          "How long to wait at start for another driver installing views "
          "into --view-store-dir; past it, certs are served and view "
          "publishes fail naming the lock's holder until a restart")
      ->check(CLI::Range(0, 3600))
      ->default_str(std::to_string(driver::kDefaultViewStoreLockWait.count()));
  serve_cmd
      .add_option("--volume-size-bytes", serve.publisher.volume_size_bytes,
                  "tmpfs size limit of each volume")
      ->check(CLI::Range(uint64_t{4096}, uint64_t{1} << 20))
      ->capture_default_str();
}

// How the DaemonSet treats requests and mounts volumes.
void AddServePolicyFlags(CLI::App& serve_cmd, driver::ServeOptions& serve,
                         bool& accept_readonly_false) {
  auto* require_readonly = serve_cmd.add_flag(
      "--require-readonly", serve.validation.require_readonly,
      "Refuse publish requests with readonly=false (pod specs without "
      "volumes[].csi.readOnly: true). Off by default: the volume is mounted "
      "read-only either way, and flux-operator v1alpha2 pods cannot set it");
  // Before readonly=false was accepted by default, this flag turned it on.
  // Kept so DaemonSets that still pass it start; it changes nothing now.
  serve_cmd
      .add_flag("--accept-readonly-false", accept_readonly_false,
                "Deprecated, no effect: readonly=false is accepted by "
                "default (see --require-readonly)")
      ->excludes(require_readonly);

  serve_cmd
      .add_option_function<std::string>(
          "--mount-api",
          [&serve](const std::string& api) {
            if (api == "auto") {
              serve.mount_api.reset();
            } else {
              serve.mount_api = api == "fsmount" ? driver::MountApi::kFsmount
                                                 : driver::MountApi::kMount;
            }
          },
          "How volumes are mounted: fsmount (fsopen/fsmount/move_mount, "
          "crash-atomic, Linux 5.2+), mount (mount(2), for older kernels), "
          "or auto (fsmount where the kernel has it)")
      ->check(CLI::IsMember({"auto", "fsmount", "mount"}))
      ->envname("MOUNT_API")
      ->default_str("auto");
  serve_cmd
      .add_option_function<std::string>(
          "--kubelet-dir",
          [&serve](const std::string& dir) {
            auto checked = driver::CheckKubeletDir(dir);
            if (!checked) throw CLI::ValidationError(checked.error());
            serve.validation.kubelet_dir = std::move(*checked);
          },
          "kubelet's --root-dir: publish and unpublish touch only "
          "<kubelet-dir>/pods/<pod-uid>/volumes/kubernetes.io~csi/<name>/"
          "mount")
      ->envname("KUBELET_DIR")
      ->default_str("/var/lib/kubelet");
  serve_cmd
      .add_option("--selinux-mount-context", serve.publisher.selinux_context,
                  "SELinux nodes (RHEL, OpenShift): mount every volume with "
                  "this context= label, e.g. "
                  "system_u:object_r:container_file_t:s0, so the runtime "
                  "does not relabel (and fail on) the read-only volume; "
                  "empty: no label")
      ->envname("SELINUX_MOUNT_CONTEXT");
}

// How many volumes the driver holds: each is a tmpfs charged to its memory
// cgroup, so the DaemonSet's memory limit follows from the node's cap
// (docs/admin/nodes.md, "Volume caps").
void AddServeCapFlags(CLI::App& serve_cmd, driver::ServeOptions& serve) {
  serve_cmd
      .add_option("--max-volumes-per-pod", serve.publisher.caps.per_pod,
                  "At most this many curve.minicluster.dev volumes per pod; "
                  "a publish past it is RESOURCE_EXHAUSTED (a MiniCluster "
                  "pod carries one)")
      ->envname("MAX_VOLUMES_PER_POD")
      ->check(CLI::Range(uint32_t{1}, uint32_t{64}))
      ->capture_default_str();
  serve_cmd
      .add_option("--max-volumes-per-node", serve.publisher.caps.per_node,
                  "At most this many volumes on the node (reported to kubelet "
                  "as max_volumes_per_node); a publish past it is "
                  "RESOURCE_EXHAUSTED. Size the memory limit from it")
      ->envname("MAX_VOLUMES_PER_NODE")
      ->check(CLI::Range(uint32_t{1}, uint32_t{100000}))
      ->capture_default_str();
}

CLI::App* AddCertCommand(CLI::App& app, CertArgs& cert_args) {
  auto* cert_cmd = app.add_subcommand(
      "cert",
      "Print the curve.cert a MiniCluster gets (debugging; holds its secret "
      "key unless --public-only)");
  auto* dir = cert_cmd->add_option(
      "--master-key-dir", cert_args.master_key_dir,
      "Directory of <key-id>.key files (the master key Secret's keys)");
  auto* file =
      cert_cmd->add_option("--master-key-file", cert_args.master_key_file,
                           "One master key file (the default key)");
  dir->excludes(file);
  cert_cmd->add_option("--key-id", cert_args.key_id,
                       "The key's id (volumeAttributes.key-id; the "
                       "MiniCluster's status.keyId); default: master");
  cert_cmd
      ->add_option("--namespace", cert_args.namespace_name,
                   "The MiniCluster's namespace")
      ->required();
  cert_cmd
      ->add_option("--minicluster", cert_args.minicluster,
                   "The MiniCluster's name")
      ->required();
  cert_cmd->add_option("--generation", cert_args.generation,
                       "The generation attribute (the MiniCluster's uid)");
  cert_cmd->add_flag("--public-only", cert_args.public_only,
                     "Print only the public key");
  return cert_cmd;
}

CLI::App* AddVerifyCommand(CLI::App& app, VerifyArgs& verify_args) {
  auto* verify_cmd = app.add_subcommand(
      "verify",
      "Check a curve.cert as a Flux broker would (format, key pair, mode)");
  verify_cmd->add_option("file", verify_args.file, "The cert file")->required();
  verify_cmd->add_option("--expect-public", verify_args.expect_public,
                         "Fail unless the public key is this Z85 key");
  verify_cmd->add_option("--expect-name", verify_args.expect_name,
                         "Fail unless metadata name is this <ns>.<name>");
  return verify_cmd;
}

int RunServe(driver::ServeOptions& serve, bool accept_readonly_false) {
  if (accept_readonly_false) {
    spdlog::warn(
        "--accept-readonly-false is deprecated and has no effect: "
        "readonly=false is accepted by default; remove the flag");
  }
  TuneForServing();
  if (auto tmpfs = ChooseTmpfsOptions(serve.publisher); !tmpfs) {
    spdlog::critical("refusing to serve: {}", tmpfs.error());
    return 2;
  }
  spdlog::info(
      "volume tmpfs: {}; SELinux context {}",
      serve.publisher.noswap ? "noswap" : "swappable (no noswap before 6.4)",
      serve.publisher.selinux_context.empty()
          ? "none"
          : serve.publisher.selinux_context);
  return driver::Serve(serve);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "flux-curve-csi: CSI node plugin that mounts a Flux MiniCluster's "
      "shared ZeroMQ CURVE certificate (curve.cert) into its pods"};
  app.set_version_flag("--version", FCC_VERSION);
  app.require_subcommand(1);
  app.fallthrough();

  std::string log_level = "info";
  std::string log_format = "text";
  app.add_option("--log-level", log_level,
                 "Log level: trace, debug, info, warn, error")
      ->envname("LOG_LEVEL")
      ->capture_default_str();
  app.add_option("--log-format", log_format, "Log format: text or json")
      ->envname("LOG_FORMAT")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();

  driver::ServeOptions serve;
  serve.endpoint = "unix:///csi/csi.sock";
  serve.master_key_file = "/etc/flux-curve-csi/master.key";
  serve.metrics_address = "0.0.0.0:9810";
  serve.kubelet_registration_path = driver::kDefaultKubeletRegistrationPath;
  serve.views_dir = "/usr/share/flux-curve-csi/views";
  serve.view_store_dir = "/csi/views";
  serve.view_staging_dir = "/csi/view-staging";
  auto* serve_cmd = app.add_subcommand(
      "serve", "Serve CSI Identity and Node on a unix socket (the DaemonSet)");
  bool accept_readonly_false = false;
  AddServeFlags(*serve_cmd, serve);
  AddServePolicyFlags(*serve_cmd, serve, accept_readonly_false);
  AddServeCapFlags(*serve_cmd, serve);
  CertArgs cert_args;
  CLI::App* cert_cmd = AddCertCommand(app, cert_args);
  VerifyArgs verify_args;
  CLI::App* verify_cmd = AddVerifyCommand(app, verify_args);

  CLI11_PARSE(app, argc, argv);
  if (auto logging =
          common::ConfigureLogging("flux-curve-csi", log_format, log_level);
      !logging) {
    std::cerr << logging.error() << "\n";
    return 2;
  }
  if (*serve_cmd) return RunServe(serve, accept_readonly_false);
  if (*cert_cmd) return PrintCert(cert_args);
  if (*verify_cmd) return VerifyCert(verify_args);
  return 2;
}
