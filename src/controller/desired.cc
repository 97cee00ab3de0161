#include "controller/desired.h"

#include <algorithm>
#include <cstring>

#include "common/names.h"
#include "common/volume_contract.h"
#include "controller/broker_grant.h"
#include "controller/broker_programs.h"
#include "controller/quantity.h"
#include "kube/object_meta.h"

namespace fcc::controller {
namespace {

using nlohmann::json;

json BaseMetadata(const MiniCluster& mc, const std::string& name) {
  return json{{"name", name},
              {"namespace", mc.namespace_name},
              {"labels", CommonLabels(mc)},
              {"ownerReferences", json::array({OwnerReference(mc)})}};
}

json PodSecurityContext(const FluxUser& user) {
  json ctx{{"runAsUser", user.uid}};
  if (user.gid) ctx["runAsGroup"] = *user.gid;
  if (user.uid != 0) ctx["runAsNonRoot"] = true;
  return ctx;
}

// A view's flux(1) is run by its path in the container (kViewFluxPath):
// started from its own directory, flux adds nothing of the view to PATH.
std::string FluxCommand(const MiniCluster& mc, const DesiredOptions& opts) {
  return FluxViewOf(mc, opts).empty() ? "flux" : kViewFluxPath;
}

// 'text' for a POSIX shell, whatever `text` holds.
std::string ShellQuote(std::string_view text) {
  std::string quoted = "'";
  for (char c : text) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

// Every call in the check is bounded by 6 s (broker_programs.h), inside
// kubelet's 10.
json BrokerReadinessProbe(const MiniCluster& mc, const DesiredOptions& opts) {
  return json{
      {"exec",
       {{"command",
         json::array({FluxCommand(mc, opts), "python", "-c", ReadinessCheck(),
                      ReadyFile(opts),
                      std::to_string(ReadinessReuseSeconds(mc.spec.size))})}}},
      {"periodSeconds", kProbePeriodSeconds},
      {"timeoutSeconds", 10},
      {"failureThreshold", 3}};
}

// Ours first: a user's own env entry of a name comes later and wins.
// FLUX_SHELL_RC_PATH: the job shell sources *.lua there (ShellRc()), and a
// job inherits it from the broker (the command) or from `kubectl exec`.
json ContainerEnv(const MiniCluster& mc, const DesiredOptions& opts) {
  json env = json::array(
      {{{"name", "FLUX_URI"}, {"value", FluxLocalUri(opts)}},
       {{"name", "FLUX_SHELL_RC_PATH"}, {"value", opts.config_mount_path}}});
  for (const auto& entry : mc.spec.env) env.push_back(entry);
  return env;
}

// The Job's labels: the common ones and the MiniCluster's Kueue labels.
json JobMetadata(const MiniCluster& mc) {
  json metadata = BaseMetadata(mc, JobName(mc));
  for (const char* key : kKueueLabels) {
    if (auto it = mc.labels.find(key); it != mc.labels.end()) {
      metadata["labels"][key] = it->second;
    }
  }
  // Kueue's partial admission: it may admit minSize..size pods and sets
  // parallelism and (with the second annotation) completions to the count.
  // Kueue refuses a minimum not below the pod count.
  if (mc.MinSize() < mc.spec.size) {
    metadata["annotations"] = {
        {kMinParallelismAnnotation, std::to_string(mc.MinSize())},
        {kCompletionsEqualParallelismAnnotation, "true"}};
  }
  return metadata;
}

// The controller's mounts, then the MiniCluster's (validated not to clash).
json VolumeMounts(const MiniCluster& mc, const DesiredOptions& opts) {
  json mounts = json::array(
      {{{"name", kCurveVolume},
        {"mountPath", opts.curve_mount_path},
        {"readOnly", true}},
       {{"name", kConfigVolume}, {"mountPath", opts.config_mount_path}},
       {{"name", kRunVolume}, {"mountPath", opts.run_mount_path}}});
  if (!FluxViewOf(mc, opts).empty()) {
    mounts.push_back({{"name", kViewVolume},
                      {"mountPath", common::kViewMountPath},
                      {"readOnly", true}});
    mounts.push_back({{"name", kViewVolume},
                      {"mountPath", kViewFluxPath},
                      {"subPath", "bin/flux"},
                      {"readOnly", true}});
  }
  if (!mc.spec.flux.state_claim.empty()) {
    mounts.push_back({{"name", kStateVolume}, {"mountPath", kStateMountPath}});
  }
  if (mc.MayAdmitFewer()) {
    mounts.push_back({{"name", kAdmittedVolume},
                      {"mountPath", AdmittedDir(opts)},
                      {"readOnly", true}});
  }
  if (ResourcesCarryTopology(mc)) {
    mounts.push_back({{"name", kTopologyVolume},
                      {"mountPath", TopologyDir(opts)},
                      {"readOnly", true}});
  }
  for (const auto& mount : mc.spec.volume_mounts) mounts.push_back(mount);
  return mounts;
}

json BrokerContainer(const MiniCluster& mc, const DesiredOptions& opts) {
  const char* shell = FluxViewOf(mc, opts).empty() ? "/bin/sh" : kViewShell;
  json container{{"name", kBrokerContainerName},
                 {"image", mc.spec.image},
                 // "$0" is "flux-broker"; spec.command becomes "$@" unchanged.
                 {"command", json::array({shell, "-c", StartScript(mc, opts),
                                          kBrokerContainerName})},
                 {"ports", json::array({{{"name", "flux-broker"},
                                         {"containerPort", mc.spec.broker_port},
                                         {"protocol", "TCP"}}})},
                 {"env", ContainerEnv(mc, opts)},
                 {"readinessProbe", BrokerReadinessProbe(mc, opts)},
                 {"volumeMounts", VolumeMounts(mc, opts)}};
  if (mc.spec.command) container["args"] = *mc.spec.command;
  if (!mc.spec.resources.empty()) container["resources"] = mc.spec.resources;
  return container;
}

json CsiVolumeSource(const MiniCluster& mc, const DesiredOptions& opts) {
  json attributes{{common::kAttrMiniCluster, mc.name},
                  // A re-created MiniCluster of the same name gets a new key.
                  {common::kAttrGeneration, mc.uid},
                  {common::kAttrOwner, mc.spec.flux_user.OwnerAttribute()}};
  if (!opts.key_id.empty()) attributes[common::kAttrKeyId] = opts.key_id;
  return json{{"driver", common::kDriverName},
              {"readOnly", true},
              {"volumeAttributes", std::move(attributes)}};
}

json Volumes(const MiniCluster& mc, const DesiredOptions& opts) {
  json volumes =
      json::array({{{"name", kCurveVolume}, {"csi", CsiVolumeSource(mc, opts)}},
                   {{"name", kConfigVolume}, {"emptyDir", json::object()}},
                   {{"name", kRunVolume}, {"emptyDir", json::object()}}});
  if (const std::string view = FluxViewOf(mc, opts); !view.empty()) {
    // No secret and the same for every MiniCluster: one attribute, the view.
    volumes.push_back({{"name", kViewVolume},
                       {"csi",
                        {{"driver", common::kDriverName},
                         {"readOnly", true},
                         {"volumeAttributes", {{common::kAttrView, view}}}}}});
  }
  if (mc.MayAdmitFewer()) {
    // Empty until the controller annotates the lead's pod.
    volumes.push_back(
        {{"name", kAdmittedVolume},
         {"downwardAPI",
          {{"items", json::array({{{"path", kAdmittedCountFile},
                                   {"fieldRef",
                                    {{"fieldPath",
                                      std::string("metadata.annotations['") +
                                          kAdmittedAnnotation + "']"}}}}})}}}});
  }
  if (ResourcesCarryTopology(mc)) {
    // Empty until the controller annotates the lead's pod.
    volumes.push_back(
        {{"name", kTopologyVolume},
         {"downwardAPI",
          {{"items", json::array({{{"path", kTopologyFile},
                                   {"fieldRef",
                                    {{"fieldPath",
                                      std::string("metadata.annotations['") +
                                          kTopologyAnnotation + "']"}}}}})}}}});
  }
  if (!mc.spec.flux.state_claim.empty()) {
    // One template for every index: followers mount it too, unused.
    volumes.push_back(
        {{"name", kStateVolume},
         {"persistentVolumeClaim", {{"claimName", mc.spec.flux.state_claim}}}});
  }
  for (const auto& volume : mc.spec.pod.volumes) volumes.push_back(volume);
  return volumes;
}

// Only the fields the MiniCluster sets: the API server drops empty ones, so
// the Job as stored matches what `render` prints.
void AddPodFields(const PodFields& pod, json& spec) {
  if (!pod.node_selector.empty()) spec["nodeSelector"] = pod.node_selector;
  if (!pod.tolerations.empty()) spec["tolerations"] = pod.tolerations;
  if (!pod.affinity.empty()) spec["affinity"] = pod.affinity;
  if (!pod.service_account_name.empty()) {
    spec["serviceAccountName"] = pod.service_account_name;
  }
}

// Most brokers stop on SIGTERM within about 3 s; one whose parent is gone
// first waits 60 s for its goodbye (flux-core's fixed timeout). A pod is
// only ever stopped to end its instance (deletion, preemption, eviction)
// and its output is already in the container log, so a short grace loses
// nothing, frees the node at once, and keeps Kueue from re-admitting a
// preempted MiniCluster while its old pods run.
constexpr int kTerminationGraceSeconds = 2;

json PodSpec(const MiniCluster& mc, const DesiredOptions& opts) {
  json spec{{"subdomain", ServiceName(mc)},
            {"restartPolicy", "Never"},
            {"terminationGracePeriodSeconds", kTerminationGraceSeconds},
            {"securityContext", PodSecurityContext(mc.spec.flux_user)},
            {"containers", json::array({BrokerContainer(mc, opts)})},
            {"volumes", Volumes(mc, opts)}};
  AddPodFields(mc.spec.pod, spec);
  return spec;
}

// The MiniCluster's pod labels and annotations with the controller's
// labels, which validation keeps them from overriding.
json PodMetadata(const MiniCluster& mc) {
  json labels = mc.spec.pod.labels;
  labels.update(CommonLabels(mc));
  json metadata{{"labels", std::move(labels)}};
  json annotations = mc.spec.pod.annotations;
  annotations.update(TopologyAnnotations(mc.spec.topology));
  if (!annotations.empty()) metadata["annotations"] = std::move(annotations);
  return metadata;
}

}  // namespace

json TopologyAnnotations(const Topology& topology) {
  json annotations = json::object();
  if (!topology.required.empty()) {
    annotations[kRequiredTopologyAnnotation] = topology.required;
  } else if (!topology.preferred.empty()) {
    annotations[kPreferredTopologyAnnotation] = topology.preferred;
  }
  if (topology.slice_size > 0) {
    annotations[kSliceRequiredTopologyAnnotation] = topology.slice_required;
    annotations[kSliceSizeAnnotation] = std::to_string(topology.slice_size);
  }
  return annotations;
}

std::string FluxViewOf(const MiniCluster& mc, const DesiredOptions& opts) {
  if (mc.spec.flux.from_image) return "";
  return mc.spec.flux.view.empty() ? opts.flux_view : mc.spec.flux.view;
}

std::string FluxRunDir(const DesiredOptions& opts) {
  return opts.run_mount_path + "/flux";
}

std::string ReadyFile(const DesiredOptions& opts) {
  return opts.run_mount_path + "/flux-broker-ready";
}

namespace {

// The Job's pod template volume `name`, or null.
const json& TemplateVolume(const json& job, const char* name) {
  const json& pod = kube::FieldAt(
      kube::FieldAt(kube::FieldAt(job, "spec"), "template"), "spec");
  const json& volumes = kube::FieldAt(pod, "volumes");
  if (volumes.is_array()) {
    for (const auto& volume : volumes) {
      if (kube::StringAt(volume, "name") == name) return volume;
    }
  }
  static const json kNone;
  return kNone;
}

}  // namespace

std::string KeyIdOfJob(const json& job) {
  const json& csi = kube::FieldAt(TemplateVolume(job, kCurveVolume), "csi");
  if (kube::StringAt(csi, "driver") != common::kDriverName) return "";
  return kube::StringAt(kube::FieldAt(csi, "volumeAttributes"),
                        common::kAttrKeyId);
}

std::string StateClaimOfJob(const json& job) {
  return kube::StringAt(
      kube::FieldAt(TemplateVolume(job, kStateVolume), "persistentVolumeClaim"),
      "claimName");
}

std::string TopologyLevelOfJob(const json& job) {
  if (TemplateVolume(job, kTopologyVolume).is_null()) return "";
  const json& annotations = kube::FieldAt(
      kube::FieldAt(kube::FieldAt(kube::FieldAt(job, "spec"), "template"),
                    "metadata"),
      "annotations");
  const std::string& required =
      kube::StringAt(annotations, kRequiredTopologyAnnotation);
  return required.empty()
             ? kube::StringAt(annotations, kPreferredTopologyAnnotation)
             : required;
}

json FluxResourcesOfJob(const json& job) {
  const json& containers = kube::FieldAt(
      kube::FieldAt(kube::FieldAt(kube::FieldAt(job, "spec"), "template"),
                    "spec"),
      "containers");
  if (!containers.is_array()) return nullptr;
  for (const auto& c : containers) {
    if (kube::StringAt(c, "name") != kBrokerContainerName) continue;
    const BrokerResources grant =
        BrokerResourcesOf(kube::FieldAt(c, "resources"));
    if (grant.cores == 0) return json{{"source", "node"}};
    return json{
        {"source", "pod"}, {"cores", grant.cores}, {"gpus", grant.gpus}};
  }
  return nullptr;
}

std::string FluxLocalUri(const DesiredOptions& opts) {
  return "local://" + FluxRunDir(opts) + "/local";
}

json OwnerReference(const MiniCluster& mc) {
  return json{{"apiVersion", kApiVersion}, {"kind", kKind},
              {"name", mc.name},           {"uid", mc.uid},
              {"controller", true},        {"blockOwnerDeletion", true}};
}

json CommonLabels(const MiniCluster& mc) {
  return json{{kAppNameLabel, "minicluster"},
              {kAppInstanceLabel, mc.name},
              {kManagedByLabel, kManagedByValue},
              {kNameLabel, mc.name}};
}

namespace {

// The broker runs as this shell's child, so the pod's exit code can say
// what ended it. A broker stopped by SIGTERM (its pod deleted or evicted)
// exits 0 like one whose instance ended, and a pod that exits 0 completes
// its index for good. So: a follower exits 0 only when its instance ended
// (no SIGTERM), else kReplaceBrokerExit; the lead exits with its program's
// code, or kLeadLostExit when stopped or killed (75 and 137 of its own
// would read as a follower's). The trap is set before the broker starts
// (a SIGTERM in between would end the shell with 143); only builtins run
// between the waits (dash forgets a reaped child once anything forks).
// An ephemeral lead does not wait: rank 0 takes longer to stop than the
// pod's grace (kTerminationGraceSeconds), and a SIGKILL's 137 would read as
// a follower's; its instance is gone either way. A persistent lead is
// replaced like a follower (its queue comes back from spec.flux.state, or
// it starts empty), and its followers must outlive it to rejoin the next:
// a rank 0 stopped by SIGTERM shuts the whole instance down (each follower
// exits 0, its index done for good), so it is killed instead, as a crash,
// and its statedir is as of its last checkpoint (every second).
std::string TrapTerm(const MiniCluster& mc) {
  std::string trap = "pid=\nterm=0\nstop=TERM\n";
  if (!mc.ephemeral()) {
    trap += "[ \"${JOB_COMPLETION_INDEX:-0}\" != 0 ] || stop=KILL\n";
  }
  trap +=
      "trap 'term=1; [ -z \"$pid\" ] || kill -$stop \"$pid\" 2>/dev/null || :";
  if (mc.ephemeral()) {
    trap += "; [ \"${JOB_COMPLETION_INDEX:-0}\" != 0 ] || exit " +
            std::to_string(kLeadLostExit);
  }
  return trap + "' TERM\n";
}

// A persistent lead's statedir: on spec.flux.state's claim, one directory
// per MiniCluster name (a MiniCluster created again under its name resumes
// its queue), else in the pod's run directory. The broker makes it as its
// own user; the claim's root must let it.
std::string StateDir(const MiniCluster& mc, const DesiredOptions& opts) {
  if (mc.spec.flux.state_claim.empty()) return FluxRunDir(opts) + "/state";
  return std::string(kStateMountPath) + "/" + mc.name;
}

// Fails the lead at once, naming the field, when the claim's root is not
// writable: the broker would fail the same way on every restart.
std::string CheckStateDir(const MiniCluster& mc) {
  if (mc.spec.flux.state_claim.empty()) return "";
  const std::string root = kStateMountPath;
  return "if [ \"${JOB_COMPLETION_INDEX:-0}\" = 0 ] && [ ! -d " + root + "/" +
         mc.name + " ] && [ ! -w " + root +
         " ]; then\n"
         "  echo \"flux-broker: spec.flux.state: claim " +
         mc.spec.flux.state_claim + " (" + root + ") is not writable by uid " +
         std::to_string(mc.spec.flux_user.uid) +
         ": give spec.fluxUser write access to the volume's root\" >&2\n"
         "  exit " +
         std::to_string(kStateUnwritableExit) +
         "\n"
         "fi\n";
}

// Waits for the broker and exits when the pod should end; falls through
// (to a restart) when a broker that crashed can come back in this pod: a
// follower (it rejoins its parent, a restarted rank 0 included) and a
// persistent lead (its statedir keeps the queue and the KVS). An ephemeral
// lead's program cannot be resumed. The restart budget
// (kBrokerRestartsInPod) is reset by a broker that stayed up
// kStableBrokerSeconds; past it the pod ends to be replaced, counted, and
// the Job's podFailurePolicy decides. /proc/uptime: the shell has no clock of
// its own, and only builtins may run before the broker is reaped.
std::string BrokerExitRules(const MiniCluster& mc) {
  const std::string replace = std::to_string(kReplaceBrokerExit);
  const std::string lead_lost = std::to_string(kLeadLostExit);
  const std::string budget = std::to_string(kBrokerRestartsInPod);
  std::string rules =
      "pid=$!\n"
      "[ \"$term\" = 0 ] || kill -$stop \"$pid\" 2>/dev/null || :\n"
      "rc=0\n"
      "wait \"$pid\" || rc=$?\n"
      "while kill -0 \"$pid\" 2>/dev/null; do rc=0; wait \"$pid\" || "
      "rc=$?; done\n";
  // A follower, and a persistent lead alike; an ephemeral lead ends here.
  const std::string as_follower = "[ \"$term\" = 0 ] || exit " + replace +
                                  "\n"
                                  "[ \"$rc\" != 0 ] || exit 0\n";
  if (mc.ephemeral()) {
    rules +=
        "if [ \"${JOB_COMPLETION_INDEX:-0}\" = 0 ]; then\n"
        "  [ \"$term\" = 0 ] || exit " +
        lead_lost + "\n  case $rc in " + replace + "|137) exit " + lead_lost +
        " ;; esac\n"
        "  exit \"$rc\"\n"
        "fi\n";
  }
  rules +=
      as_follower +
      "read -r up _ </proc/uptime\n"
      "[ $((${up%.*} - started)) -lt " +
      std::to_string(kStableBrokerSeconds) +
      " ] || restarts=0\n"
      "restarts=$((restarts + 1))\n"
      "if [ \"$restarts\" -gt " +
      budget +
      " ]; then\n"
      "  echo \"flux-broker: the broker exited $rc, failing " +
      budget +
      " restarts in a row: this pod ends\" >&2\n"
      "  exit " +
      replace +
      "\n"
      "fi\n"
      "echo \"flux-broker: the broker exited $rc: restarting it in this pod "
      "($restarts of " +
      budget + ")\" >&2\n";
  return rules;
}

// Persistent MiniClusters: rank 0 runs rc1 without a scheduler and
// SchedulerGate loads it once every rank that is coming is up: all of
// them, or those Kueue admitted when it may admit fewer (none gated when
// the count did not come). An initial program would pass
// FLUX_SCHED_MODULE on to instances it starts.
bool GatesScheduler(const MiniCluster& mc) { return !mc.ephemeral(); }

std::string GatedBrokers(const MiniCluster& mc) {
  return mc.MayAdmitFewer() ? "\"$admitted\"" : std::to_string(mc.spec.size);
}

// The lead's gate, started before its broker (nothing may fork between
// the broker's start and its wait).
std::string SchedulerGateCommand(const MiniCluster& mc,
                                 const std::string& flux) {
  return "if [ \"$sched\" = none ]; then\n"
         "  [ -z \"$gate\" ] || kill \"$gate\" 2>/dev/null || :\n  " +
         flux + " python -c " + ShellQuote(SchedulerGate()) + " " +
         GatedBrokers(mc) + " " + flux + " " + ShellQuote(kGateStopReason) +
         " &\n"
         "  gate=$!\n"
         "fi\n";
}

// When Kueue may admit fewer brokers than size, the lead waits for the
// count (the controller annotates its pod once the Job runs): its broker
// waits for that many (broker.quorum), excludes the ranks never admitted
// from the instance's resources, and gates its scheduler on the admitted
// ones. No count in kAdmittedWaitSeconds (no controller to give it, a
// MultiKueue worker's copy): spec.minSize, as before the count existed.
std::string AdmittedCount(const MiniCluster& mc, const DesiredOptions& opts) {
  const std::string last = std::to_string(mc.spec.size - 1);
  const std::string min_size = std::to_string(mc.MinSize());
  return "admitted=\nexclude=\nquorum=" + min_size +
         "\n"
         "if [ \"${JOB_COMPLETION_INDEX:-0}\" = 0 ]; then\n"
         "  admitted=$(" +
         FluxCommand(mc, opts) + " python -c " + ShellQuote(FileTextWait()) +
         " " + AdmittedCountPath(opts) + " " +
         std::to_string(kAdmittedWaitSeconds) +
         " count) || admitted=\n"
         "  if [ -n \"$admitted\" ]; then\n"
         "    quorum=$admitted\n"
         "    if [ \"$admitted\" -eq " +
         last + " ]; then exclude=" + last +
         "\n"
         "    elif [ \"$admitted\" -lt " +
         last + " ]; then exclude=\"$admitted-" + last +
         "\"; fi\n"
         "  else\n"
         "    echo \"flux-broker: no admitted count in " +
         std::to_string(kAdmittedWaitSeconds) + " s (annotation " +
         kAdmittedAnnotation + "): starting with spec.minSize, " + min_size +
         " brokers\" >&2\n"
         "  fi\n"
         "fi\n";
}

// Appends `key = "$key"` to the TOML `file` when the shell variable is set.
std::string ConfigLineIfSet(const std::string& key, const std::string& file) {
  return "[ -z \"$" + key + "\" ] || printf '" + key + " = \"%s\"\\n' \"$" +
         key + "\" >> " + file + "\n";
}

// The broker config, with the lead's `exclude` (AdmittedCount) when Kueue
// may admit fewer brokers than size, and its domain graph (FetchTopology).
std::string WriteBrokerConfig(const MiniCluster& mc,
                              const DesiredOptions& opts) {
  const std::string config = FluxBrokerConfig(mc, opts);
  const std::string file = BrokerConfigPath(opts);
  if (!mc.MayAdmitFewer() && !WritesDomainGraph(mc)) {
    return "printf '%s' " + ShellQuote(config) + " > " + file + "\n";
  }
  const size_t split =
      config.find(kResourceTableHead) + std::strlen(kResourceTableHead);
  std::string script = "printf '%s' " + ShellQuote(config.substr(0, split)) +
                       " > " + file + "\n";
  if (mc.MayAdmitFewer()) script += ConfigLineIfSet("exclude", file);
  if (WritesDomainGraph(mc)) script += ConfigLineIfSet("scheduling", file);
  script +=
      "printf '%s' " + ShellQuote(config.substr(split)) + " >> " + file + "\n";
  if (mc.MayAdmitFewer()) {
    script +=
        "printf '%s' " +
        ShellQuote(AdmittedValidator(AdmittedCountPath(opts), mc.spec.size)) +
        " > " + opts.config_mount_path + "/" + kAdmittedValidatorFile + "\n";
  }
  return script;
}

// The lead waits for its ranks' domains (TopologyResourceConfig, from the
// controller's annotation) and, under Fluxion, writes them as its graph;
// without them in time it starts as without spec.topology, and without
// the graph (the writer failed) with the domains as properties alone.
std::string FetchTopology(const MiniCluster& mc, const DesiredOptions& opts) {
  if (!ResourcesCarryTopology(mc)) return "";
  const std::string wait = std::to_string(kTopologyWaitSeconds);
  const std::string flux = FluxCommand(mc, opts);
  const std::string domains = TopologyDir(opts) + "/" + kTopologyFile;
  std::string script =
      "topology=\nscheduling=\n"
      "if [ \"${JOB_COMPLETION_INDEX:-0}\" = 0 ]; then\n"
      "  topology=$(" +
      flux + " python -c " + ShellQuote(FileTextWait()) + " " + domains + " " +
      wait +
      ") || topology=\n"
      "  if [ -z \"$topology\" ]; then\n"
      "    echo \"flux-broker: no topology in " +
      wait + " s (annotation " + kTopologyAnnotation +
      "): the ranks have no domain properties\" >&2\n";
  if (WritesDomainGraph(mc)) {
    const BrokerResources grant = BrokerResourcesOf(mc.spec.resources);
    std::string args =
        domains + " '" + BrokerHostlist(mc) + "' " +
        std::to_string(grant.cores) + " " + std::to_string(grant.gpus) + " " +
        FluxDomainType(mc.spec.topology.level()) + " " + DomainGraphPath(opts);
    // The ranks Kueue admitted (AdmittedCount), else all.
    if (mc.MayAdmitFewer()) {
      args += " \"${admitted:-" + std::to_string(mc.spec.size) + "}\"";
    }
    script += "  elif " + flux + " python -c " +
              ShellQuote(DomainGraphWriter()) + " " + args +
              "; then\n"
              "    scheduling=" +
              DomainGraphPath(opts) +
              "\n"
              "  else\n"
              "    echo \"flux-broker: could not write the domains as "
              "Fluxion's graph: they are node properties alone\" >&2\n";
  }
  return script + "  fi\nfi\n";
}

// Appends the lead's domains to broker.toml (as [[resource.config]]
// properties, which flux resource list shows), and with the graph, the
// frobnicator that places a job within one domain.
std::string AppendTopology(const MiniCluster& mc, const DesiredOptions& opts) {
  if (!ResourcesCarryTopology(mc)) return "";
  const std::string file = BrokerConfigPath(opts);
  std::string script =
      "[ -z \"$topology\" ] || printf '%s\\n' \"$topology\" >> " + file + "\n";
  if (WritesDomainGraph(mc)) {
    const std::string plugin =
        opts.config_mount_path + "/" + kDomainFrobnicatorFile;
    script +=
        "if [ -n \"$scheduling\" ]; then\n  printf '%s' " +
        ShellQuote(DomainFrobnicator(
            DomainGraphPath(opts), FluxDomainType(mc.spec.topology.level()))) +
        " > " + plugin + "\n  printf '[ingest.frobnicator]\\nplugins = [\"" +
        plugin + "\"]\\n' >> " + file + "\nfi\n";
  }
  return script;
}

// broker.toml as the start script writes it: the lead's domains first,
// for its graph, then the config, then the domains' properties.
std::string BrokerConfigSteps(const MiniCluster& mc,
                              const DesiredOptions& opts) {
  return FetchTopology(mc, opts) + WriteBrokerConfig(mc, opts) +
         AppendTopology(mc, opts);
}

std::string BrokerCommand(const MiniCluster& mc, const DesiredOptions& opts) {
  const std::string config = BrokerConfigPath(opts);
  std::string command = GatesScheduler(mc) ? "FLUX_SCHED_MODULE=$sched " : "";
  command += FluxCommand(mc, opts) + " start --config-path=" + config +
             " -Srundir=" + FluxRunDir(opts) +
             " -Sstatedir=" + StateDir(mc, opts) +
             " -Stbon.connect_timeout=" + mc.spec.connect_timeout +
             " -Slocal-uri=" + FluxLocalUri(opts);
  // Kueue may admit fewer brokers (partial admission): the instance starts
  // with minSize online, the ranks not admitted stay down.
  if (mc.MayAdmitFewer()) command += " -Sbroker.quorum=$quorum";
  if (mc.ephemeral()) {
    // Only rank 0 runs the initial program; when it exits the instance
    // shuts down and every follower broker exits 0.
    return command + " -- \"$@\" &\n";
  }
  // No initial program: the instance stays up until it is shut down. The
  // run and state dirs outlive a broker that exits, for the next one.
  return command +
         " -Sbroker.rc2_none=1 -Srundir-cleanup=0 -Sstatedir-cleanup=0 &\n";
}

}  // namespace

std::string StartScript(const MiniCluster& mc, const DesiredOptions& opts) {
  std::string script;
  script += "# Written by minicluster-controller; the same for every index.\n";
  script += "set -eu\n";
  if (!mc.MayAdmitFewer()) {
    script += BrokerConfigSteps(mc, opts);
  }
  script += "printf '%s' " + ShellQuote(ShellRc()) + " > " +
            opts.config_mount_path + "/" + kShellRcFile + "\n";
  script += NodeResourceCommand(mc, opts, FluxCommand(mc, opts));
  if (!FluxViewOf(mc, opts).empty()) {
    // The broker runs rc1 and rc3 with $SHELL -c (default /bin/bash, which
    // the image need not have); the view's job shell drops it from jobs.
    script += "export SHELL=" + std::string(kViewShell) + "\n";
  }
  // rundir: the broker makes it as its own user (flux-core refuses a socket
  // directory its instance owner does not own), so no mkdir is needed; rank
  // 0's statedir goes in it too (else TMPDIR or /var/tmp, which an image
  // need not have).
  script += CheckStateDir(mc);
  script += TrapTerm(mc);
  if (mc.MayAdmitFewer()) {
    script += AdmittedCount(mc, opts);
    script += BrokerConfigSteps(mc, opts);
  }
  if (GatesScheduler(mc)) {
    script += "sched=\ngate=\n[ \"${JOB_COMPLETION_INDEX:-0}\" != 0 ] || ";
    script += mc.MayAdmitFewer() ? "[ -z \"$admitted\" ] || sched=none\n"
                                 : "sched=none\n";
  }
  script += "restarts=0\nwhile :; do\n";
  script += "read -r up _ </proc/uptime\nstarted=${up%.*}\n";
  if (GatesScheduler(mc))
    script += SchedulerGateCommand(mc, FluxCommand(mc, opts));
  script += BrokerCommand(mc, opts);
  script += BrokerExitRules(mc);
  script += "done\n";
  return script;
}

std::string NetworkPolicyName(const MiniCluster& mc) { return mc.name; }

namespace {

// `protocol` ports lo..hi as a NetworkPolicy port entry.
json PortRange(const char* protocol, int lo, int hi) {
  json port{{"protocol", protocol}, {"port", lo}};
  if (hi > lo) port["endPort"] = hi;
  return port;
}

// Every TCP and UDP port but the broker's.
json PortsButTheBrokers(int broker_port) {
  json ports = json::array();
  if (broker_port > 1) ports.push_back(PortRange("TCP", 1, broker_port - 1));
  if (broker_port < 65535) {
    ports.push_back(PortRange("TCP", broker_port + 1, 65535));
  }
  ports.push_back(PortRange("UDP", 1, 65535));
  return ports;
}

}  // namespace

json DesiredNetworkPolicy(const MiniCluster& mc) {
  const json brokers{{"matchLabels", {{kNameLabel, mc.name}}}};
  const json broker_port =
      json::array({{{"protocol", "TCP"}, {"port", mc.spec.broker_port}}});
  return json{
      {"apiVersion", "networking.k8s.io/v1"},
      {"kind", "NetworkPolicy"},
      {"metadata", BaseMetadata(mc, NetworkPolicyName(mc))},
      {"spec",
       {{"podSelector", brokers},
        {"policyTypes", json::array({"Ingress"})},
        {"ingress",
         json::array(
             {{{"from", json::array({{{"podSelector", brokers}}})},
               {"ports", broker_port}},
              {{"ports", PortsButTheBrokers(mc.spec.broker_port)}}})}}}};
}

json DesiredService(const MiniCluster& mc, const DesiredOptions& opts) {
  return json{{"apiVersion", "v1"},
              {"kind", "Service"},
              {"metadata", BaseMetadata(mc, ServiceName(mc))},
              {"spec",
               {{"clusterIP", "None"},
                // Brokers must resolve each other before any of them is ready.
                {"publishNotReadyAddresses", true},
                {"selector", {{kNameLabel, mc.name}}},
                {"ports", json::array({{{"name", "flux-broker"},
                                        {"port", mc.spec.broker_port},
                                        {"targetPort", mc.spec.broker_port},
                                        {"protocol", "TCP"}}})}}}};
}

namespace {

json ExitCodesRule(const char* action, const char* op, json codes) {
  return json{{"action", action},
              {"onExitCodes",
               {{"containerName", kBrokerContainerName},
                {"operator", op},
                {"values", std::move(codes)}}}};
}

// First match wins. A lead lost fails its index, even evicted: its
// instance is gone. A disruption (eviction, preemption, node lost)
// replaces a follower without counting against spec.brokerRestarts; a
// follower that stopped or was killed (OOM) counts. Any other code is the
// lead's program failing. FailIndex, not FailJob: with maxFailedIndexes 0
// it fails the Job just the same, but only for pods the Job still tracks,
// while FailJob also acts on the pods a suspend (Kueue preemption) just
// stopped, failing the Job when Kueue admits it again.
json BrokerFailurePolicy() {
  return json{
      {"rules",
       json::array(
           {ExitCodesRule("FailIndex", "In", json::array({kLeadLostExit})),
            json{{"action", "Ignore"},
                 {"onPodConditions", json::array({{{"type", "DisruptionTarget"},
                                                   {"status", "True"}}})}},
            ExitCodesRule("Count", "In",
                          json::array({kReplaceBrokerExit, 137})),
            ExitCodesRule("FailIndex", "NotIn",
                          json::array({0, kReplaceBrokerExit, 137}))})}};
}

}  // namespace

json DesiredJob(const MiniCluster& mc, const DesiredOptions& opts) {
  return json{
      {"apiVersion", "batch/v1"},
      {"kind", "Job"},
      {"metadata", JobMetadata(mc)},
      {"spec",
       {{"completionMode", "Indexed"},
        {"completions", mc.spec.size},
        {"parallelism", mc.spec.size},
        // Always created suspended: Kueue (queued) or the controller
        // (unqueued) starts it.
        {"suspend", true},
        // A lost follower is replaced under its own index and hostname and
        // rejoins the running instance (flux-core takes a restarted
        // follower back); an index lost more often fails the Job.
        {"backoffLimitPerIndex", mc.spec.broker_restarts},
        {"maxFailedIndexes", 0},
        {"podFailurePolicy", BrokerFailurePolicy()},
        // The instance is done when rank 0 (index 0) succeeds; the Job
        // completes and frees its quota even if followers linger.
        {"successPolicy",
         {{"rules", json::array({{{"succeededIndexes", "0"}}})}}},
        {"template",
         {{"metadata", PodMetadata(mc)}, {"spec", PodSpec(mc, opts)}}}}}};
}

json JobApplyBody(const MiniCluster& mc) {
  return json{{"apiVersion", "batch/v1"},
              {"kind", "Job"},
              {"metadata", BaseMetadata(mc, JobName(mc))}};
}

json JobSuspendApplyBody(const MiniCluster& mc, bool suspend) {
  return json{
      {"apiVersion", "batch/v1"},
      {"kind", "Job"},
      {"metadata", {{"name", JobName(mc)}, {"namespace", mc.namespace_name}}},
      {"spec", {{"suspend", suspend}}}};
}

bool IsSubset(const json& want, const json& have) {
  if (want.is_object()) {
    if (!have.is_object()) return false;
    for (const auto& [key, value] : want.items()) {
      auto it = have.find(key);
      if (it == have.end() || !IsSubset(value, *it)) return false;
    }
    return true;
  }
  if (want.is_array()) {
    if (!have.is_array() || have.size() != want.size()) return false;
    for (size_t i = 0; i < want.size(); ++i) {
      if (!IsSubset(want[i], have[i])) return false;
    }
    return true;
  }
  return want == have;
}

}  // namespace fcc::controller
