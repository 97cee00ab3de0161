// MiniCluster -> the Service and Job the controller wants to exist, plus
// the Flux broker config and start script inside the Job's pod template.
// Pure functions: the reconciler and `render` share them, so what `render`
// prints is what the reconciler sends.
#pragma once

#include <array>
#include <expected>
#include <nlohmann/json.hpp>
#include <string>

#include "common/volume_contract.h"
#include "controller/broker_config.h"
#include "controller/minicluster.h"

namespace fcc::controller {

inline constexpr char kManagedByValue[] = "minicluster-controller";
inline constexpr char kBrokerContainerName[] = "flux-broker";
inline constexpr char kDefaultFluxView[] = "flux-core-0.88.0";
// Inside a view: the shell the start script runs with (the view's own, so
// the image needs none).
inline constexpr char kViewShell[] = "/opt/flux/libexec/flux-view/sh";
// A broker container's exit codes beyond its program's own (the Job's
// podFailurePolicy acts on them): a follower that stopped while its
// instance goes on (replace it), and a lead broker lost (fail the Job).
inline constexpr int kReplaceBrokerExit = 75;  // EX_TEMPFAIL
inline constexpr int kLeadLostExit = 76;
// A persistent lead that cannot write its statedir on spec.flux.state's
// claim (fail the Job: a new pod would meet the same volume).
inline constexpr int kStateUnwritableExit = 78;  // EX_CONFIG
// A broker that crashes is restarted in its pod (StartScript) this many
// times in a row; one that stayed up kStableBrokerSeconds starts a new
// count. Past it the pod ends with the exit codes above.
inline constexpr int kBrokerRestartsInPod = 3;
inline constexpr int kStableBrokerSeconds = 600;
// How long the lead of a MiniCluster Kueue may admit in part waits for the
// admitted count (the controller's annotation on its pod) before it starts
// as if minSize were admitted.
inline constexpr int kAdmittedWaitSeconds = 60;

// The claim of spec.flux.state in the Job's pod template (what its pods
// mount), or "".
std::string StateClaimOfJob(const nlohmann::json& job);

// Settings of the whole controller (flags), not of one MiniCluster.
struct DesiredOptions {
  std::string cluster_domain = "cluster.local";
  // Where the CSI volume (and so curve.cert) is mounted in every pod.
  std::string curve_mount_path{common::kCertMountPath};
  // A writable emptyDir the start script writes the broker config into.
  std::string config_mount_path = kConfigMountPath;
  // A writable emptyDir over /run. The start script makes run/flux in it as
  // the broker's user (flux-core refuses a socket directory its instance
  // owner does not own) and the broker listens on run/flux/local: where the
  // flux CLI looks with no FLUX_URI at all (the system instance's default),
  // so `kubectl exec POD -- flux ...` just works.
  std::string run_mount_path = kRunMountPath;
  // The Flux view of MiniClusters that name none (--flux-view), stamped
  // into each Job when it is created, like the key id.
  std::string flux_view = kDefaultFluxView;
  // The master key new MiniClusters' certs come from (--key-id), stamped
  // into each Job as volumeAttributes.key-id when it is created; empty: no
  // attribute, the driver's default key. A Job keeps its key for life.
  std::string key_id;
  // --multikueue-worker: make the Service and NetworkPolicy of the Jobs
  // that Kueue's MultiKueue copies here from a manager (copied_job.h).
  bool multikueue_worker = false;
};

// Checks options that reach every broker's start script and config: the
// error names the flag and the fix (a --cluster-domain with a newline or a
// quote would run as a shell line in every tenant's pod).
std::expected<void, std::string> CheckDesiredOptions(
    const DesiredOptions& opts);

// local:///run/flux/local: the broker's local URI, also set as FLUX_URI in
// every container (and so in `kubectl exec` and exec probes).
std::string FluxLocalUri(const DesiredOptions& opts);
// /run/flux: the local socket's directory, made by the broker's user.
std::string FluxRunDir(const DesiredOptions& opts);
// /run/flux-broker-ready: the readiness probe's last verdict (beside the
// run dir, which the broker makes).
std::string ReadyFile(const DesiredOptions& opts);

std::string ServiceName(const MiniCluster& mc);
std::string JobName(const MiniCluster& mc);

// The hostlist of all brokers, e.g. "demo-[0-3]" (pods of an Indexed Job
// are named <job>-<index> by the Job controller).
std::string BrokerHostlist(const MiniCluster& mc);

// The ownerReference every object made for `mc` carries, so the garbage
// collector deletes it with the MiniCluster.
nlohmann::json OwnerReference(const MiniCluster& mc);

// The labels on the Service, the Job and the Job's pods.
nlohmann::json CommonLabels(const MiniCluster& mc);

// The view a MiniCluster's pods mount; "" when its image brings Flux.
std::string FluxViewOf(const MiniCluster& mc, const DesiredOptions& opts);

// The start script: writes broker.toml with shell builtins only, then
// execs `flux start`, which makes the socket directory as the broker's
// user. It runs with the view's shell (or the image's /bin/sh with
// spec.flux.fromImage), so the image needs neither a shell nor coreutils.
// The same for every index; Flux picks the rank from the hostname.
// spec.command arrives as "$@", never through the shell parser.
std::string StartScript(const MiniCluster& mc, const DesiredOptions& opts);

// A broker's share as Flux sees it: whole cores from the container's CPU
// limit, else its request (rounded up), and GPUs from the extended
// resources that name them, each a Kubernetes quantity in any form
// (quantity.h). The limit: what the broker's tasks may use, where a lower
// request only sets what the node guarantees (a small node's MiniClusters
// oversubscribe so). cores 0: no CPU given, hwloc's view stays.
// The most cores or GPUs one broker is given: about what the largest nodes
// have (768 CPUs, 16 GPUs), since Fluxion on rank 0 models each one of
// every rank. The spec refuses a larger quantity (minicluster.h);
// BrokerResourcesOf clamps to it.
inline constexpr int kMaxBrokerCores = 1024;
inline constexpr int kMaxBrokerGpus = 64;
// The extended resources that name GPUs.
inline constexpr std::array<const char*, 2> kGpuResources = {"nvidia.com/gpu",
                                                             "amd.com/gpu"};
struct BrokerResources {
  int cores = 0;
  int gpus = 0;
};
BrokerResources BrokerResourcesOf(const nlohmann::json& resources);

// What each of a Job's brokers gives Flux (status.fluxResources):
// {"source": "pod", "cores": N, "gpus": M} from the broker container's
// grant, or {"source": "node"} when it has no CPU limit or request and
// Flux sees the node's hwloc view; null without a broker container.
nlohmann::json FluxResourcesOfJob(const nlohmann::json& job);

// The headless Service (full server-side-apply body; the controller owns
// all of it).
// The NetworkPolicy that keeps the broker port to the MiniCluster's own
// pods: the brokers' CURVE keeps the key safe, this keeps strangers from
// holding the port (availability). Every other port stays open to all, as
// without the policy; SCTP is left out (not every CNI takes it).
nlohmann::json DesiredNetworkPolicy(const MiniCluster& mc);
std::string NetworkPolicyName(const MiniCluster& mc);

nlohmann::json DesiredService(const MiniCluster& mc,
                              const DesiredOptions& opts);

// The complete Job as created: suspended, Indexed, successPolicy on
// index 0, the CSI volume and the start script.
nlohmann::json DesiredJob(const MiniCluster& mc, const DesiredOptions& opts);

// The master key id a Job's pods get (its curve volume's key-id); "" when
// the Job names none (the driver's default key) or is not a MiniCluster's.
std::string KeyIdOfJob(const nlohmann::json& job);

// What the controller keeps applying to an existing Job (its own labels and
// the ownerReference). Everything else was set once, at creation, and
// belongs to the Job controller or Kueue afterwards; see plan.h.
nlohmann::json JobApplyBody(const MiniCluster& mc);

// Body for the separate "launcher" field manager: spec.suspend of an
// unqueued MiniCluster's Job.
nlohmann::json JobSuspendApplyBody(const MiniCluster& mc, bool suspend);

// True if every field present in `want` is present in `have` with the same
// value (objects recursively, arrays element by element with equal length).
// Lets the reconciler skip writes the API server would treat as no-ops.
bool IsSubset(const nlohmann::json& want, const nlohmann::json& have);

}  // namespace fcc::controller
