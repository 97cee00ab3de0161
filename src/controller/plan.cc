#include "controller/plan.h"

#include "controller/brokers.h"
#include "controller/status.h"
#include "kube/api_path.h"
#include "kube/object_meta.h"
#include "kube/time_format.h"

namespace fcc::controller {
namespace {

using nlohmann::json;

bool JobFinished(const json& job) {
  const json& conditions =
      kube::FieldAt(kube::FieldAt(job, "status"), "conditions");
  if (!conditions.is_array()) return false;
  for (const auto& c : conditions) {
    const std::string& type = kube::StringAt(c, "type");
    if ((type == "Complete" || type == "Failed") &&
        kube::StringAt(c, "status") == "True") {
      return true;
    }
  }
  return false;
}

bool JobSuspended(const json& job) {
  const json& suspend = kube::FieldAt(kube::FieldAt(job, "spec"), "suspend");
  return suspend.is_boolean() && suspend.get<bool>();
}

Action StatusAction(const MiniCluster& mc, json status) {
  return Action{
      Action::Kind::kApplyStatus,
      kube::ObjectPath(kApiVersion, kPlural, mc.namespace_name, mc.name,
                       "status"),
      json{{"apiVersion", kApiVersion},
           {"kind", kKind},
           {"metadata", {{"name", mc.name}, {"namespace", mc.namespace_name}}},
           {"status", std::move(status)}},
      kFieldManager, true};
}

// A Job of the MiniCluster's name that it does not control: a user's, or
// the previous MiniCluster of this name still being garbage-collected.
bool JobInTheWay(const MiniCluster& mc, const json* job) {
  return job != nullptr && !kube::ControlledBy(*job, mc.uid);
}

// A Service of the MiniCluster's name that it does not control: a user's,
// or the previous MiniCluster's being garbage-collected. It is never taken
// over (its selector would then pick the MiniCluster's pods).
bool ServiceInTheWay(const MiniCluster& mc, const json* service) {
  return service != nullptr && !kube::ControlledBy(*service, mc.uid);
}

// Pending, reason <kind>NameTaken: an object of that kind and name that the
// MiniCluster does not control is in the way.
json NameTakenStatus(const MiniCluster& mc, const std::string& kind,
                     const std::string& name, const std::string& now) {
  json status = ComputeStatus(mc, nullptr, nullptr, now);
  status["conditions"][0]["reason"] = kind + "NameTaken";
  status["conditions"][0]["message"] =
      "a " + kind + " named " + name +
      " exists that this MiniCluster does not control; waiting for it to be "
      "deleted";
  return status;
}

std::optional<Action> StatusStep(const ParsedMiniCluster& parsed,
                                 const Observed& observed,
                                 const std::string& now, bool service_taken) {
  const MiniCluster& mc = parsed.mc;
  json status;
  if (!parsed.errors.empty()) {
    status = InvalidSpecStatus(mc, parsed.errors, now);
  } else if (JobInTheWay(mc, observed.job)) {
    status = NameTakenStatus(mc, "Job", JobName(mc), now);
  } else if (service_taken || ServiceInTheWay(mc, observed.service)) {
    status = NameTakenStatus(mc, "Service", ServiceName(mc), now);
  } else {
    status =
        ComputeStatus(mc, observed.job, observed.workload, now, observed.pods);
  }
  if (status == mc.status) return std::nullopt;
  return StatusAction(mc, std::move(status));
}

std::optional<Action> ServiceStep(const MiniCluster& mc, const json* observed,
                                  const DesiredOptions& options) {
  // Created, not applied: an apply would take over a Service of that name
  // that the label-filtered cache does not show.
  return OwnedObjectStep(
      DesiredService(mc, options), observed, mc.uid,
      Action::Kind::kCreateService, Action::Kind::kApplyService,
      kube::CollectionPath("v1", "services", mc.namespace_name));
}

// A NetworkPolicy of that name that the MiniCluster does not control is left
// alone: the brokers work without it, only less protected (the create's 409
// says so in the log).
std::optional<Action> NetworkPolicyStep(const MiniCluster& mc,
                                        const json* observed) {
  return OwnedObjectStep(
      DesiredNetworkPolicy(mc), observed, mc.uid,
      Action::Kind::kCreateNetworkPolicy, Action::Kind::kApplyNetworkPolicy,
      kube::CollectionPath("networking.k8s.io/v1", "networkpolicies",
                           mc.namespace_name));
}

// An apply of one annotation on the lead's pod, as field manager `manager`.
Action LeadAnnotationApply(Action::Kind kind, const MiniCluster& mc,
                           const json& pod, const char* key,
                           const std::string& value, const char* manager) {
  const std::string& name = kube::ObjectMeta(pod).name();
  return {kind,
          kube::ObjectPath("v1", "pods", mc.namespace_name, name),
          {{"apiVersion", "v1"},
           {"kind", "Pod"},
           {"metadata",
            {{"name", name},
             {"namespace", mc.namespace_name},
             {"annotations", {{key, value}}}}}},
          manager,
          true};
}

// Kueue may admit fewer brokers than size (the Job asks it to, with
// kMinParallelismAnnotation: the cached MiniCluster has no minSize): once
// the Job runs, the lead's pod is told how many (its start script waits
// for the annotation).
void AdmittedCountSteps(const MiniCluster& mc, const json& job,
                        const std::vector<json>* pods,
                        std::vector<Action>& actions) {
  const json& asked = kube::FieldAt(
      kube::FieldAt(kube::FieldAt(job, "metadata"), "annotations"),
      kMinParallelismAnnotation);
  if (!asked.is_string() || pods == nullptr || JobSuspended(job) ||
      JobFinished(job)) {
    return;
  }
  const std::string count = std::to_string(AdmittedSize(mc, job));
  for (const json* pod : LeadPodsToTell(*pods, count)) {
    actions.push_back(LeadAnnotationApply(Action::Kind::kApplyLeadAdmitted, mc,
                                          *pod, kAdmittedAnnotation, count,
                                          kFieldManager));
  }
}

// spec.topology: once every broker has a node, the lead's pod is told each
// rank's domain, which its start script adds to R (broker_config.h).
void TopologySteps(const MiniCluster& mc, const json& job,
                   const Observed& observed, std::vector<Action>& actions) {
  const std::string level = TopologyLevelOfJob(job);
  if (level.empty() || observed.pods == nullptr ||
      observed.node_domains == nullptr || JobSuspended(job) ||
      JobFinished(job)) {
    return;
  }
  const auto domains = IndexesByDomain(*observed.pods, AdmittedSize(mc, job),
                                       *observed.node_domains);
  const json* lead = LivePodOfIndex0(*observed.pods);
  if (!domains || lead == nullptr) return;
  std::string text = TopologyResourceConfig(mc, *domains);
  // Said, so that the lead does not wait for it.
  if (text.empty()) text = "# no broker's node has " + level;
  actions.push_back(LeadAnnotationApply(Action::Kind::kApplyLeadTopology, mc,
                                        *lead, kTopologyAnnotation, text,
                                        kTopologyFieldManager));
}

// An existing Job: its metadata, and spec.suspend of an unqueued one.
void ExistingJobSteps(const MiniCluster& mc, const json& job,
                      std::vector<Action>& actions) {
  const std::string path =
      kube::ObjectPath("batch/v1", "jobs", mc.namespace_name, JobName(mc));
  json metadata = JobApplyBody(mc);
  if (!IsSubset(Comparable(metadata), job)) {
    actions.push_back({Action::Kind::kApplyJob, path, std::move(metadata),
                       kFieldManager, true});
  }
  const bool queued = !mc.QueueName().empty() ||
                      kube::ObjectMeta(job).has_label(kQueueNameLabel);
  if (!queued && !JobFinished(job) && JobSuspended(job) != mc.spec.suspend) {
    actions.push_back({Action::Kind::kSetJobSuspend, path,
                       JobSuspendApplyBody(mc, mc.spec.suspend),
                       kLauncherFieldManager, true});
  }
}

}  // namespace

std::optional<Action> OwnedObjectStep(const json& desired, const json* observed,
                                      const std::string& owner_uid,
                                      Action::Kind create, Action::Kind apply,
                                      const std::string& collection) {
  if (observed == nullptr) {
    return Action{create, collection, desired, kCreateFieldManager, false};
  }
  if (!kube::ControlledBy(*observed, owner_uid) ||
      IsSubset(Comparable(desired), *observed)) {
    return std::nullopt;
  }
  return Action{apply, collection + "/" + kube::ObjectMeta(desired).name(),
                desired, kFieldManager, true};
}

json Comparable(const json& desired) {
  json out{{"metadata",
            {{"labels", desired["metadata"]["labels"]},
             {"ownerReferences", desired["metadata"]["ownerReferences"]}}}};
  if (desired.contains("spec")) out["spec"] = desired["spec"];
  return out;
}

std::string ActionName(Action::Kind kind) {
  switch (kind) {
    case Action::Kind::kCreateService:
      return "create Service";
    case Action::Kind::kApplyService:
      return "apply Service";
    case Action::Kind::kCreateNetworkPolicy:
      return "create NetworkPolicy";
    case Action::Kind::kApplyNetworkPolicy:
      return "apply NetworkPolicy";
    case Action::Kind::kCreateJob:
      return "create Job";
    case Action::Kind::kApplyJob:
      return "apply Job metadata";
    case Action::Kind::kSetJobSuspend:
      return "set Job suspend";
    case Action::Kind::kApplyLeadAdmitted:
      return "apply the lead pod's admitted count";
    case Action::Kind::kApplyLeadTopology:
      return "apply the lead pod's topology";
    case Action::Kind::kApplyStatus:
      return "apply status";
  }
  return "unknown";
}

std::optional<ParsedMiniCluster> ParseObserved(const Observed& observed) {
  if (observed.minicluster == nullptr ||
      kube::ObjectMeta(*observed.minicluster).deleting()) {
    return std::nullopt;
  }
  ParseResult parsed = ParseMiniCluster(*observed.minicluster);
  if (!parsed.minicluster) return std::nullopt;
  return ParsedMiniCluster{std::move(*parsed.minicluster), parsed.ErrorText()};
}

std::vector<Action> PlanReconcile(const Observed& observed,
                                  const DesiredOptions& options,
                                  const std::string& now) {
  return PlanReconcile(observed, ParseObserved(observed), options, now);
}

std::vector<Action> PlanReconcile(
    const Observed& observed, const std::optional<ParsedMiniCluster>& parsed,
    const DesiredOptions& options, const std::string& now) {
  std::vector<Action> actions;
  if (!parsed) return actions;
  const MiniCluster& mc = parsed->mc;
  // Brokers find each other through the Service: no Job while another's
  // Service holds the name.
  if (parsed->errors.empty() && !ServiceInTheWay(mc, observed.service)) {
    if (auto service = ServiceStep(mc, observed.service, options))
      actions.push_back(std::move(*service));
    if (auto policy = NetworkPolicyStep(mc, observed.network_policy))
      actions.push_back(std::move(*policy));
    if (observed.job == nullptr) {
      actions.push_back(
          {Action::Kind::kCreateJob,
           kube::CollectionPath("batch/v1", "jobs", mc.namespace_name),
           DesiredJob(mc, options), kCreateFieldManager, false});
    } else if (!JobInTheWay(mc, observed.job)) {
      ExistingJobSteps(mc, *observed.job, actions);
      AdmittedCountSteps(mc, *observed.job, observed.pods, actions);
      TopologySteps(mc, *observed.job, observed, actions);
    }
  }
  if (auto status = StatusStep(*parsed, observed, now, false))
    actions.push_back(std::move(*status));
  return actions;
}

std::optional<Action> PlanStatus(const Observed& observed,
                                 const std::string& now, bool service_taken) {
  return PlanStatus(observed, ParseObserved(observed), now, service_taken);
}

std::optional<Action> PlanStatus(const Observed& observed,
                                 const std::optional<ParsedMiniCluster>& parsed,
                                 const std::string& now, bool service_taken) {
  if (!parsed) return std::nullopt;
  return StatusStep(*parsed, observed, now, service_taken);
}

std::optional<std::chrono::seconds> TtlLeft(
    const MiniCluster& mc, const json& object,
    std::chrono::system_clock::time_point now) {
  if (!mc.spec.ttl_seconds_after_finished) return std::nullopt;
  const std::string& state =
      kube::StringAt(kube::FieldAt(object, "status"), "state");
  if (state != "Succeeded" && state != "Failed") return std::nullopt;
  const json* finished = kube::FindCondition(object, state);
  if (finished == nullptr || kube::StringAt(*finished, "status") != "True")
    return std::nullopt;
  const auto since =
      kube::ParseTime(kube::StringAt(*finished, "lastTransitionTime"));
  if (!since) return std::nullopt;
  const auto expires =
      *since + std::chrono::seconds(*mc.spec.ttl_seconds_after_finished);
  return std::chrono::ceil<std::chrono::seconds>(expires - now);
}

Deletion DeleteMiniClusterRequest(const MiniCluster& mc,
                                  const std::string& uid) {
  return {
      kube::ObjectPath(kApiVersion, "miniclusters", mc.namespace_name, mc.name),
      {{"apiVersion", "v1"},
       {"kind", "DeleteOptions"},
       {"preconditions", {{"uid", uid}}},
       {"propagationPolicy", "Background"}}};
}

}  // namespace fcc::controller
