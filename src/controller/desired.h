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
#include "controller/broker_grant.h"
#include "controller/desired_options.h"
#include "controller/minicluster.h"
#include "controller/object_names.h"

namespace fcc::controller {

inline constexpr char kManagedByValue[] = "minicluster-controller";
inline constexpr char kBrokerContainerName[] = "flux-broker";
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
// The topology level whose domains the Job's lead waits for (its template
// mounts kTopologyVolume), or "". From the Job: the MiniCluster's cache
// keeps neither spec.topology nor spec.resources.
std::string TopologyLevelOfJob(const nlohmann::json& job);

// local:///run/flux/local: the broker's local URI, also set as FLUX_URI in
// every container (and so in `kubectl exec` and exec probes).
std::string FluxLocalUri(const DesiredOptions& opts);
// /run/flux: the local socket's directory, made by the broker's user.
std::string FluxRunDir(const DesiredOptions& opts);
// /run/flux-broker-ready: the readiness probe's last verdict (beside the
// run dir, which the broker makes).
std::string ReadyFile(const DesiredOptions& opts);

// The ownerReference every object made for `mc` carries, so the garbage
// collector deletes it with the MiniCluster.
nlohmann::json OwnerReference(const MiniCluster& mc);

// The labels on the Service, the Job and the Job's pods.
nlohmann::json CommonLabels(const MiniCluster& mc);

// Kueue's pod set topology requests (Topology-Aware Scheduling), on the
// Job's pod template: spec.topology's one level, or nothing.
inline constexpr char kRequiredTopologyAnnotation[] =
    "kueue.x-k8s.io/podset-required-topology";
inline constexpr char kPreferredTopologyAnnotation[] =
    "kueue.x-k8s.io/podset-preferred-topology";
inline constexpr char kSliceRequiredTopologyAnnotation[] =
    "kueue.x-k8s.io/podset-slice-required-topology";
inline constexpr char kSliceSizeAnnotation[] =
    "kueue.x-k8s.io/podset-slice-size";
nlohmann::json TopologyAnnotations(const Topology& topology);

// The view a MiniCluster's pods mount; "" when its image brings Flux.
std::string FluxViewOf(const MiniCluster& mc, const DesiredOptions& opts);

// The start script: writes broker.toml with shell builtins only, then
// execs `flux start`, which makes the socket directory as the broker's
// user. It runs with the view's shell (or the image's /bin/sh with
// spec.flux.fromImage), so the image needs neither a shell nor coreutils.
// The same for every index; Flux picks the rank from the hostname.
// spec.command arrives as "$@", never through the shell parser.
std::string StartScript(const MiniCluster& mc, const DesiredOptions& opts);

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
