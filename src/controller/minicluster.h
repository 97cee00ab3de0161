// The MiniCluster custom resource (minicluster.dev/v1alpha1) as the
// controller sees it: parsed from the API server's JSON, validated and
// defaulted. Pure: no I/O.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fcc::controller {

inline constexpr char kApiVersion[] = "minicluster.dev/v1alpha1";
inline constexpr char kKind[] = "MiniCluster";
inline constexpr char kPlural[] = "miniclusters";

// Kueue's labels, copied from the MiniCluster to the Job it creates.
inline constexpr char kQueueNameLabel[] = "kueue.x-k8s.io/queue-name";
inline constexpr char kPriorityClassLabel[] = "kueue.x-k8s.io/priority-class";
// Kueue evicts a Workload that has run this long: how an administrator
// bounds a persistent MiniCluster's hold on quota (docs/admin/kueue.md).
inline constexpr char kMaxExecTimeLabel[] =
    "kueue.x-k8s.io/max-exec-time-seconds";
// Kueue's partial admission of a batch/v1 Job (pkg/controller/jobs/job).
inline constexpr char kMinParallelismAnnotation[] =
    "kueue.x-k8s.io/job-min-parallelism";
inline constexpr char kCompletionsEqualParallelismAnnotation[] =
    "kueue.x-k8s.io/job-completions-equal-parallelism";
// The MiniCluster's labels that the controller reads (and copies).
inline constexpr std::array<const char*, 3> kKueueLabels = {
    kQueueNameLabel, kPriorityClassLabel, kMaxExecTimeLabel};

// What the controller puts into every pod template itself. A MiniCluster's
// own pod fields (podLabels, volumes, volumeMounts, ...) may not name these:
// the curve cert, the broker config and the broker's socket depend on them.
inline constexpr char kNameLabel[] = "minicluster.dev/name";
inline constexpr char kAppNameLabel[] = "app.kubernetes.io/name";
inline constexpr char kAppInstanceLabel[] = "app.kubernetes.io/instance";
inline constexpr char kManagedByLabel[] = "app.kubernetes.io/managed-by";
// The project's prefix: labels and annotations under it are the controller's.
inline constexpr char kOwnPrefix[] = "minicluster.dev/";
inline constexpr char kCurveVolume[] = "curve";
inline constexpr char kConfigVolume[] = "flux-config";
inline constexpr char kRunVolume[] = "flux-run";
inline constexpr char kViewVolume[] = "flux-view";
inline constexpr char kStateVolume[] = "flux-state";
// The count of brokers Kueue admitted, on the lead's pod: the controller
// sets the annotation, a downward API volume (kAdmittedVolume) shows it to
// the lead's start script and to the instance's job validator.
inline constexpr char kAdmittedVolume[] = "flux-admitted";
inline constexpr char kAdmittedAnnotation[] = "minicluster.dev/admitted";
// Each rank's domain of spec.topology's level, as [[resource.config]]
// entries with a property each, on the lead's pod: the controller sets the
// annotation once every broker has a node, a downward API volume
// (kTopologyVolume) shows it to the lead's start script.
inline constexpr char kTopologyVolume[] = "flux-topology";
inline constexpr char kTopologyAnnotation[] = "minicluster.dev/topology";
// Where spec.flux.state's claim is mounted; rank 0's statedir is
// <here>/<MiniCluster name>.
inline constexpr char kStateMountPath[] = "/var/lib/flux";
inline constexpr char kConfigMountPath[] = "/etc/flux/minicluster";
// Where a view's flux(1) appears in the broker container: a directory on
// every image's default PATH, so that `kubectl exec POD -- flux ...` and a
// job's PATH find it without the container's PATH being replaced (which
// would lose the image's own). Nothing else of the view is on PATH.
inline constexpr char kViewFluxPath[] = "/usr/local/bin/flux";
inline constexpr char kRunMountPath[] = "/run";

inline constexpr int kDefaultBrokerPort = 8050;
inline constexpr char kDefaultConnectTimeout[] = "5s";
// Per index, how often a lost broker is replaced (spec.brokerRestarts; the
// Job's backoffLimitPerIndex). Disruptions (eviction, preemption, a node
// lost) do not count.
inline constexpr int32_t kDefaultBrokerRestarts = 3;
inline constexpr int32_t kMaxBrokerRestarts = 100;

// The uid (and optionally gid) the Flux broker runs as; it also owns the
// curve.cert on the CSI volume, because Flux refuses a cert it cannot read
// and one readable by group or other.
struct FluxUser {
  int64_t uid = 0;
  std::optional<int64_t> gid;

  // The CSI `owner` volume attribute: "uid" or "uid:gid".
  std::string OwnerAttribute() const;
};

// The pod template's own fields a MiniCluster may set (spec.podLabels,
// spec.nodeSelector, ...). Validated, then copied into the Job's pod
// template at creation, next to what the controller sets itself.
struct PodFields {
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::map<std::string, std::string> node_selector;
  nlohmann::json tolerations = nlohmann::json::array();  // []core/v1 Toleration
  nlohmann::json affinity = nlohmann::json::object();    // core/v1 Affinity
  // Added after the controller's own volumes.
  nlohmann::json volumes = nlohmann::json::array();  // []core/v1 Volume
  std::string service_account_name;                  // "": the default
};

// Fluxion's queue policies (flux-config-sched-fluxion-qmanager(5)); the
// first is Fluxion's own default.
inline constexpr std::array<std::string_view, 4> kQueuePolicies = {
    "fcfs", "easy", "conservative", "hybrid"};

// The instance's scheduler (spec.flux.scheduler; the fields flux-operator's
// v1alpha2 MiniCluster has).
struct FluxScheduler {
  // sched-simple instead of Fluxion.
  bool simple = false;
  // Fluxion's queue policy, one of kQueuePolicies; empty: Fluxion's default.
  std::string queue_policy;
};

// Where the brokers' Flux comes from (spec.flux).
struct FluxSource {
  // The Flux view the node driver serves (spec.flux.view), mounted at
  // /opt/flux; empty: the controller's --flux-view.
  std::string view;
  // spec.flux.fromImage: the image carries Flux itself (flux on its PATH,
  // /bin/sh), as before views existed; no view volume.
  bool from_image = false;
  FluxScheduler scheduler;
  // spec.flux.state.claimName: a PersistentVolumeClaim that holds a
  // persistent MiniCluster's lead state (rank 0's statedir), so that a
  // replaced lead pod restores its queue. Empty: the state lives in the pod.
  std::string state_claim;
};

// Where Kueue's Topology-Aware Scheduling places the brokers
// (spec.topology): within one domain of a node label level (required), or
// in as few as it can (preferred). At most one is set; neither: anywhere.
struct Topology {
  std::string required;
  std::string preferred;
  // Kueue's pod set slices: each run of slice_size consecutive brokers in
  // one domain of slice_required (a level at or below the request's).
  std::string slice_required;
  int32_t slice_size = 0;
  const std::string& level() const {
    return required.empty() ? preferred : required;
  }
};

struct MiniClusterSpec {
  int32_t size = 1;
  std::string image;
  // Set: ephemeral (rank 0 runs it, the instance exits when it ends).
  // Unset: persistent (the instance stays up until the MiniCluster is
  // deleted).
  std::optional<std::vector<std::string>> command;
  nlohmann::json resources;  // core/v1 ResourceRequirements, passed through
  nlohmann::json env;        // []core/v1 EnvVar, passed through
  // Added to the broker container's own mounts; each names one of `volumes`.
  nlohmann::json volume_mounts = nlohmann::json::array();  // []VolumeMount
  FluxUser flux_user;
  FluxSource flux;
  int32_t broker_port = kDefaultBrokerPort;
  int32_t broker_restarts = kDefaultBrokerRestarts;
  // The fewest brokers a queued MiniCluster may start with (spec.minSize):
  // Kueue's partial admission for the Job, Flux's broker.quorum for the
  // instance. Unset: size.
  std::optional<int32_t> min_size;
  // Flux's tbon.topo (spec.tbonTopo): kary:K, binomial or mincrit[:K].
  // Empty: chosen by size (broker_config.h, TbonTopo).
  std::string tbon_topo;
  // Seconds after it Succeeded or Failed that the controller deletes the
  // MiniCluster (spec.ttlSecondsAfterFinished). Unset: kept until deleted.
  std::optional<int32_t> ttl_seconds_after_finished;
  bool suspend = false;
  std::string connect_timeout = kDefaultConnectTimeout;
  PodFields pod;
  Topology topology;
};

struct MiniCluster {
  std::string name;
  std::string namespace_name;
  std::string uid;
  int64_t generation = 0;
  std::map<std::string, std::string> labels;
  MiniClusterSpec spec;
  nlohmann::json status;  // as observed; the controller rewrites it

  bool ephemeral() const { return spec.command.has_value(); }
  // The Kueue queue the MiniCluster asks for, empty when unqueued.
  std::string QueueName() const;
  // The fewest brokers it may start with: spec.minSize when queued (Kueue
  // may admit fewer than size), else size.
  int32_t MinSize() const;
  // Kueue may admit fewer brokers than size (partial admission).
  bool MayAdmitFewer() const { return MinSize() < spec.size; }
};

struct ParseResult {
  std::optional<MiniCluster> minicluster;
  // One message per problem, each naming the field and the fix.
  std::vector<std::string> errors;

  bool ok() const { return minicluster.has_value() && errors.empty(); }
  std::string ErrorText() const;  // errors joined with "; "
};

// Parses, defaults and validates a MiniCluster object (the API server's
// JSON, or a manifest read by `render -f`). Validation repeats the CRD
// schema's rules so a MiniCluster that slipped past an older CRD (or a
// manifest given to `render`) still gets a clear message.
ParseResult ParseMiniCluster(const nlohmann::json& object);

// The MiniCluster as the controller's cache keeps it: what reconciling a
// MiniCluster whose Job exists reads (name, uid, generation, the Kueue
// labels, spec.size, image, fluxUser, brokerPort, suspend, connectTimeout,
// ttlSecondsAfterFinished, and status). The free-form fields (env, volumes,
// affinity, the pod labels and annotations, ...), the command and the
// metadata's annotations are read only to create the Job, so a tenant's large
// MiniClusters cost the cache little; the reconciler reads the whole object
// from the API server before it creates a Job (reconciler.h).
void TrimMiniClusterForCache(nlohmann::json& object);

// The fields the CRD's structural schema declares, where it prunes the rest:
// the object's top level, spec, spec.fluxUser, spec.resources and each
// spec.tolerations[] entry. A test holds them to deploy/controller/crd.yaml.
struct KnownFields {
  std::vector<std::string_view> top, spec, flux_user, flux, flux_scheduler,
      flux_state, resources, toleration, topology, topology_slice;
};
const KnownFields& MiniClusterFields();

// "<path>: unknown field ..." for each field of a manifest that the CRD does
// not declare. In a cluster the API server refuses those (kubectl's strict
// field validation) or prunes them, so ParseMiniCluster need not look;
// `render -f` has no API server and asks this instead.
std::vector<std::string> UnknownFields(const nlohmann::json& object);

}  // namespace fcc::controller
