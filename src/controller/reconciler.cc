#include "controller/reconciler.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "common/volume_contract.h"
#include "controller/brokers.h"
#include "controller/copied_job.h"
#include "controller/status.h"
#include "kube/api_path.h"
#include "kube/informer.h"
#include "kube/object_meta.h"
#include "kube/time_format.h"

namespace fcc::controller {
namespace {

using nlohmann::json;

// The Job in an API response, trimmed like the cache's, if it is one that
// the MiniCluster `uid` controls (a test double may answer with anything).
std::optional<json> ControlledJob(json job, const std::string& uid) {
  if (!job.is_object() || !kube::ControlledBy(job, uid)) return std::nullopt;
  TrimJobForCache(job);
  return job;
}

// What is read of a Job's pod template: the curve volume's key id and the
// state volume's claim (the status), and for the worker role the subdomain, the
// broker port and that the curve volume is there (copied_job.h).
json TemplateSkeleton(const json& job) {
  const json& pod = kube::FieldAt(
      kube::FieldAt(kube::FieldAt(job, "spec"), "template"), "spec");
  json skeleton = json::object();
  if (const json& subdomain = kube::FieldAt(pod, "subdomain");
      subdomain.is_string()) {
    skeleton["subdomain"] = subdomain;
  }
  if (const json& containers = kube::FieldAt(pod, "containers");
      containers.is_array()) {
    for (const auto& c : containers) {
      if (kube::StringAt(c, "name") != kBrokerContainerName) continue;
      json kept{{"name", kBrokerContainerName}};
      if (c.contains("ports")) kept["ports"] = c["ports"];
      if (c.contains("resources")) kept["resources"] = c["resources"];
      skeleton["containers"] = json::array({std::move(kept)});
    }
  }
  if (const json& volumes = kube::FieldAt(pod, "volumes"); volumes.is_array()) {
    for (const auto& v : volumes) {
      const json& csi = kube::FieldAt(v, "csi");
      // The cert volume only: a view volume says nothing the status reads.
      if (kube::StringAt(v, "name") != kCurveVolume ||
          kube::StringAt(csi, "driver") != common::kDriverName) {
        continue;
      }
      json kept{{"name", v.value("name", "")},
                {"csi", {{"driver", common::kDriverName}}}};
      if (std::string key_id = KeyIdOfJob(job); !key_id.empty()) {
        kept["csi"]["volumeAttributes"] = {{common::kAttrKeyId, key_id}};
      }
      skeleton["volumes"].push_back(std::move(kept));
    }
  }
  if (std::string claim = StateClaimOfJob(job); !claim.empty()) {
    skeleton["volumes"].push_back(
        {{"name", kStateVolume},
         {"persistentVolumeClaim", {{"claimName", std::move(claim)}}}});
  }
  if (!TopologyLevelOfJob(job).empty()) {
    skeleton["volumes"].push_back({{"name", kTopologyVolume}});
  }
  return skeleton;
}

// Kueue's topology annotation of the template, for TopologyLevelOfJob.
json TopologyAnnotationsOfJob(const json& job) {
  const json& annotations = kube::FieldAt(
      kube::FieldAt(kube::FieldAt(kube::FieldAt(job, "spec"), "template"),
                    "metadata"),
      "annotations");
  json kept = json::object();
  for (const char* key :
       {kRequiredTopologyAnnotation, kPreferredTopologyAnnotation}) {
    if (annotations.contains(key)) kept[key] = annotations[key];
  }
  return kept;
}

}  // namespace

void TrimJobForCache(json& job) {
  kube::TrimForCache(job);
  auto spec = job.find("spec");
  if (spec == job.end() || !spec->is_object()) return;
  json skeleton = TemplateSkeleton(job);
  json topology = TopologyAnnotationsOfJob(job);
  spec->erase("template");
  if (!skeleton.empty()) (*spec)["template"]["spec"] = std::move(skeleton);
  if (!topology.empty()) {
    (*spec)["template"]["metadata"]["annotations"] = std::move(topology);
  }
}

std::string RetryReasonName(RetryReason reason) {
  switch (reason) {
    case RetryReason::kNone:
      return "none";
    case RetryReason::kWriteFailed:
      return "write failed";
    case RetryReason::kMiniClusterLookupFailed:
      return "MiniCluster lookup failed";
    case RetryReason::kJobLookupFailed:
      return "Job lookup failed";
    case RetryReason::kJobNameTaken:
      return "Job name taken";
    case RetryReason::kServiceNameTaken:
      return "Service name taken";
    case RetryReason::kUnexpectedError:
      return "unexpected error";
  }
  return "unknown";
}

Observed Reconciler::Snapshot::View() const {
  auto ptr = [](const std::optional<json>& o) { return o ? &*o : nullptr; };
  return {&minicluster,        ptr(service), ptr(job),     ptr(workload),
          ptr(network_policy), &pods,        &node_domains};
}

std::optional<json> Reconciler::WorkloadOf(const json& job) const {
  const auto candidates =
      caches_.workloads.ByIndex(kube::ObjectMeta(job).uid());
  const json* workload = FindWorkloadForJob(candidates, job);
  if (workload == nullptr) return std::nullopt;
  return *workload;
}

std::optional<Reconciler::Snapshot> Reconciler::Observe(
    const std::string& key) const {
  auto minicluster = caches_.miniclusters.Get(key);
  if (!minicluster) return std::nullopt;
  Snapshot snapshot;
  snapshot.minicluster = std::move(*minicluster);
  // Service and Job share the MiniCluster's name (desired.h).
  snapshot.service = caches_.services.Get(key);
  snapshot.network_policy = caches_.network_policies.Get(key);
  snapshot.job = caches_.jobs.Get(key);
  if (snapshot.job) {
    snapshot.workload = WorkloadOf(*snapshot.job);
    snapshot.pods = caches_.pods.ByIndex(kube::ObjectMeta(*snapshot.job).uid());
  }
  return snapshot;
}

void Reconciler::LookUpNodeDomains(const MiniCluster& mc, Snapshot& snapshot) {
  if (!snapshot.job) return;
  const std::string level = TopologyLevelOfJob(*snapshot.job);
  if (level.empty()) return;
  for (const std::string& node :
       NodesToLookUp(snapshot.pods, AdmittedSize(mc, *snapshot.job))) {
    const kube::HttpResponse got =
        api_.Get(kube::ObjectPath("v1", "nodes", "", node));
    const json object = json::parse(got.body, nullptr, false);
    if (!got.ok() || !object.is_object()) {
      spdlog::warn("minicluster {}/{}: get node {} for its topology: {}",
                   mc.namespace_name, mc.name, node, got.Describe());
      continue;
    }
    snapshot.node_domains[node] = kube::StringAt(
        kube::FieldAt(kube::FieldAt(object, "metadata"), "labels"), level);
  }
}

std::expected<std::optional<json>, std::string> Reconciler::GetMiniCluster(
    const json& cached) {
  const kube::ObjectMeta meta(cached);
  const kube::HttpResponse got = api_.Get(kube::ObjectPath(
      kApiVersion, kPlural, meta.namespace_name(), meta.name()));
  if (got.status == 404) return std::nullopt;
  json whole = json::parse(got.body, nullptr, false);
  if (!got.ok() || !whole.is_object()) {
    return std::unexpected("get MiniCluster failed: " + got.Describe());
  }
  kube::TrimForCache(whole);
  return whole;
}

ReconcileResult Reconciler::Reconcile(const std::string& key) {
  auto snapshot = Observe(key);
  if (snapshot && !snapshot->job) {
    auto whole = GetMiniCluster(snapshot->minicluster);
    if (!whole) {
      spdlog::warn("minicluster {}: {}", key, whole.error());
      return ReconcileResult::Retry(RetryReason::kMiniClusterLookupFailed,
                                    std::move(whole.error()));
    }
    if (std::optional<json> found = std::move(*whole); found.has_value()) {
      snapshot->minicluster = std::move(*found);
    } else {
      snapshot.reset();  // deleted since the cache saw it
    }
  }
  if (!snapshot) {
    written_.Forget(key);
    if (options_.multikueue_worker) return ReconcileCopiedJob(key);
    return ReconcileResult::Done();  // deleted: GC cleans up
  }
  if (options_.multikueue_worker) WarnIfCopiedJobHere(key, *snapshot);
  const auto clock_now = std::chrono::system_clock::now();
  const std::string now = kube::FormatTime(clock_now);
  const std::optional<ParsedMiniCluster> parsed =
      ParseObserved(snapshot->View());
  if (parsed && parsed->errors.empty())
    LookUpNodeDomains(parsed->mc, *snapshot);
  const auto plan = PlanReconcile(snapshot->View(), parsed, options_, now);
  ReconcileResult result = Execute(key, *snapshot, parsed, plan, now);
  if (result.retry() || !parsed) return result;
  const bool status_written =
      !plan.empty() && plan.back().kind == Action::Kind::kApplyStatus;
  return DeleteIfExpired(
      key, *snapshot, parsed->mc,
      status_written ? plan.back().body : snapshot->minicluster, clock_now);
}

ReconcileResult Reconciler::DeleteIfExpired(
    const std::string& key, const Snapshot& snapshot, const MiniCluster& mc,
    const json& object, std::chrono::system_clock::time_point now) {
  // A refused spec is Failed too: its TTL runs if it has a valid one.
  const auto left = TtlLeft(mc, object, now);
  if (!left.has_value()) return ReconcileResult::Done();
  if (*left > std::chrono::seconds(0)) {
    ReconcileResult later;
    later.after = *left;
    return later;
  }
  const Deletion del = DeleteMiniClusterRequest(
      mc, kube::ObjectMeta(snapshot.minicluster).uid());
  const kube::HttpResponse response = api_.Delete(del.path, del.body);
  // 404: gone already; 409: the uid precondition failed, so the name now
  // belongs to a new MiniCluster, which is not ours to delete.
  if (response.ok() || response.status == 404 || response.status == 409) {
    spdlog::info(
        "minicluster {}: deleted {} s after it finished "
        "(spec.ttlSecondsAfterFinished)",
        key, mc.spec.ttl_seconds_after_finished.value_or(0));
    return ReconcileResult::Done();
  }
  return ReconcileResult::Retry(RetryReason::kWriteFailed,
                                "delete MiniCluster: " + response.Describe());
}

ReconcileResult Reconciler::ReconcileCopiedJob(const std::string& key) {
  const std::optional<json> job = caches_.jobs.Get(key);
  if (!job || !IsCopiedMiniClusterJob(*job)) return ReconcileResult::Done();
  const auto desired = DesiredForCopiedJob(*job, options_);
  if (!desired) {
    spdlog::warn("job {}: copied by MultiKueue, but {}; no Service is made",
                 key, desired.error());
    return ReconcileResult::Done();
  }
  const std::optional<json> service = caches_.services.Get(key);
  const std::optional<json> policy = caches_.network_policies.Get(key);
  const std::string& uid = kube::ObjectMeta(*job).uid();
  // A labelled Service the Job does not control is cached and left alone;
  // an unlabelled one shows as the create's 409.
  bool service_taken = service && !kube::ControlledBy(*service, uid);
  ReconcileResult result;
  for (const Action& action :
       PlanCopiedJob(*desired, *job, service ? &*service : nullptr,
                     policy ? &*policy : nullptr)) {
    if (action.kind == Action::Kind::kCreateService) {
      ReconcileResult created = CreateService(key, action, uid);
      service_taken |= created.reason == RetryReason::kServiceNameTaken;
      result.Merge(std::move(created));
    } else if (action.kind == Action::Kind::kCreateNetworkPolicy) {
      result.Merge(CreateNetworkPolicy(key, action, uid));
    } else {
      result.Merge(Apply(key, action));
    }
  }
  if (service_taken) {
    WarnCopiedJob(key, *job, CopiedJobConflict::kServiceTaken);
  }
  return result;
}

void Reconciler::WarnIfCopiedJobHere(const std::string& key,
                                     const Snapshot& snapshot) {
  const std::optional<json> job = caches_.jobs.Get(key);
  if (!job || !IsCopiedMiniClusterJob(*job) ||
      kube::ControlledBy(*job, kube::ObjectMeta(snapshot.minicluster).uid())) {
    return;
  }
  WarnCopiedJob(key, *job, CopiedJobConflict::kMiniClusterHere);
}

void Reconciler::WarnCopiedJob(const std::string& key, const json& job,
                               CopiedJobConflict conflict) {
  const EventSpec event = CopiedJobConflictEvent(job, conflict);
  {
    // Once per Job and cause: the reconcile is retried with back-off.
    std::lock_guard lock(warned_mu_);
    const std::string seen = kube::ObjectMeta(job).uid() + "/" + event.reason;
    if (!warned_.insert(seen).second) return;
  }
  spdlog::warn("job {}: {}", key, event.note);
  if (events_ == nullptr) return;
  json regarding = job;  // the cache's copy may lack its type
  regarding["apiVersion"] = "batch/v1";
  regarding["kind"] = "Job";
  events_->Record(regarding, event);
}

ReconcileResult Reconciler::Execute(
    const std::string& key, const Snapshot& snapshot,
    const std::optional<ParsedMiniCluster>& parsed,
    const std::vector<Action>& plan, const std::string& now) {
  ReconcileResult result;
  const Action* planned_status = nullptr;  // the plan's last step, if any
  // Set by the create step: the Job the caches did not have yet.
  std::optional<json> job_after_create;
  bool service_taken = false;
  for (const Action& action : plan) {
    if (action.kind == Action::Kind::kApplyStatus) {
      planned_status = &action;
    } else if (action.kind == Action::Kind::kCreateService) {
      ReconcileResult created = CreateService(
          key, action, kube::ObjectMeta(snapshot.minicluster).uid());
      service_taken = created.reason == RetryReason::kServiceNameTaken;
      result.Merge(std::move(created));
    } else if (service_taken) {
      continue;  // no Job while another's Service holds the name
    } else if (action.kind == Action::Kind::kCreateNetworkPolicy) {
      result.Merge(CreateNetworkPolicy(
          key, action, kube::ObjectMeta(snapshot.minicluster).uid()));
    } else if (action.kind == Action::Kind::kCreateJob) {
      Created created =
          CreateJob(key, action, kube::ObjectMeta(snapshot.minicluster).uid());
      if (created.abort) return created.result;
      result.Merge(std::move(created.result));
      job_after_create = std::move(created.job);
    } else {
      result.Merge(Apply(key, action));
    }
  }
  if (service_taken) {
    if (auto status = PlanStatus(snapshot.View(), parsed, now, true)) {
      result.Merge(ApplyStatus(key, snapshot.minicluster, *status));
    }
    return result;
  }
  if (!job_after_create) {
    if (planned_status != nullptr) {
      result.Merge(ApplyStatus(key, snapshot.minicluster, *planned_status));
    }
    return result;
  }
  // The planned status was computed without the Job ("CreatingJob"), which
  // the next reconcile would overwrite at once: the status of the Job as it
  // now is (created, or another's in the way) saves that write.
  Observed with_job = snapshot.View();
  with_job.job = &*job_after_create;
  if (auto status = PlanStatus(with_job, parsed, now))
    result.Merge(ApplyStatus(key, snapshot.minicluster, *status));
  return result;
}

ReconcileResult Reconciler::ApplyStatus(const std::string& key,
                                        const json& minicluster,
                                        const Action& action) {
  ReconcileResult result = Apply(key, action);
  if (!result.retry()) RecordEvents(key, minicluster, action.body["status"]);
  return result;
}

// Compared with the status this controller last wrote, when the cache has
// not caught up with it yet: an event per change, not per write.
void Reconciler::RecordEvents(const std::string& key, const json& minicluster,
                              const json& status) {
  if (events_ == nullptr) return;
  const kube::ObjectMeta meta(minicluster);
  const json before =
      written_.Before(key, meta.uid(), kube::FieldAt(minicluster, "status"));
  const bool queued =
      meta.has_label(kQueueNameLabel) || status.contains("workload");
  for (const EventSpec& event : StatusEvents(before, status, queued))
    events_->Record(minicluster, event);
  written_.Wrote(key, meta.uid(), status);
}

ReconcileResult Reconciler::Apply(const std::string& key,
                                  const Action& action) {
  const kube::HttpResponse response =
      api_.Apply(action.path, action.body, action.field_manager, action.force);
  if (response.ok()) {
    spdlog::info("minicluster {}: {}", key, ActionName(action.kind));
    return ReconcileResult::Done();
  }
  if (action.kind == Action::Kind::kApplyStatus && response.status == 404) {
    return ReconcileResult::Done();  // the MiniCluster was deleted meanwhile
  }
  const std::string what =
      ActionName(action.kind) + " failed: " + response.Describe();
  spdlog::warn("minicluster {}: {}", key, what);
  return ReconcileResult::Retry(RetryReason::kWriteFailed, what);
}

Reconciler::CreateOutcome Reconciler::CreateOrFind(const std::string& key,
                                                   const Action& action,
                                                   const std::string& uid,
                                                   std::string_view kind) {
  using Kind = CreateOutcome::Kind;
  const kube::HttpResponse response =
      api_.Create(action.path, action.body, action.field_manager);
  if (response.ok()) {
    spdlog::info("minicluster {}: {}", key, ActionName(action.kind));
    return {Kind::kCreated, json::parse(response.body, nullptr, false), ""};
  }
  if (response.status != 409) {
    std::string what =
        fmt::format("create {} failed: {}", kind, response.Describe());
    spdlog::warn("minicluster {}: {}", key, what);
    return {Kind::kFailed, nullptr, std::move(what)};
  }
  const kube::HttpResponse got =
      api_.Get(action.path + "/" + kube::ObjectMeta(action.body).name());
  json existing = json::parse(got.body, nullptr, false);
  if (!got.ok() || !existing.is_object()) {
    std::string what =
        fmt::format("create {}: 409, then get: {}", kind, got.Describe());
    spdlog::warn("minicluster {}: {}", key, what);
    return {Kind::kLookupFailed, nullptr, std::move(what)};
  }
  if (kube::ControlledBy(existing, uid)) {
    return {Kind::kOurs, std::move(existing), ""};
  }
  spdlog::info(
      "minicluster {}: a {} of that name exists that it does not control; "
      "retrying",
      key, kind);
  return {Kind::kTheirs, std::move(existing), ""};
}

Reconciler::Created Reconciler::CreateJob(const std::string& key,
                                          const Action& action,
                                          const std::string& uid) {
  using Kind = CreateOutcome::Kind;
  CreateOutcome created = CreateOrFind(key, action, uid, "Job");
  switch (created.kind) {
    case Kind::kCreated:
      return {ReconcileResult::Done(),
              ControlledJob(std::move(created.object), uid)};
    case Kind::kOurs:
      TrimJobForCache(created.object);
      return {ReconcileResult::Done(), std::move(created.object)};
    case Kind::kTheirs:
      // The status step then shows JobNameTaken; retried with back-off
      // until the name is free.
      TrimJobForCache(created.object);
      return {ReconcileResult::Retry(RetryReason::kJobNameTaken,
                                     "a Job of that name is in the way"),
              std::move(created.object)};
    case Kind::kLookupFailed:
      return {ReconcileResult::Retry(RetryReason::kJobLookupFailed,
                                     std::move(created.what)),
              std::nullopt, true};
    case Kind::kFailed:
      break;
  }
  return {ReconcileResult::Retry(RetryReason::kWriteFailed,
                                 std::move(created.what)),
          std::nullopt};
}

ReconcileResult Reconciler::CreatedOrRetry(CreateOutcome created,
                                           ReconcileResult theirs) {
  using Kind = CreateOutcome::Kind;
  switch (created.kind) {
    case Kind::kCreated:
    case Kind::kOurs:
      return ReconcileResult::Done();
    case Kind::kTheirs:
      return theirs;
    case Kind::kFailed:
    case Kind::kLookupFailed:
      break;
  }
  return ReconcileResult::Retry(RetryReason::kWriteFailed,
                                std::move(created.what));
}

ReconcileResult Reconciler::CreateService(const std::string& key,
                                          const Action& action,
                                          const std::string& uid) {
  return CreatedOrRetry(
      CreateOrFind(key, action, uid, "Service"),
      ReconcileResult::Retry(RetryReason::kServiceNameTaken,
                             "a Service of that name is in the way"));
}

ReconcileResult Reconciler::CreateNetworkPolicy(const std::string& key,
                                                const Action& action,
                                                const std::string& uid) {
  CreateOutcome created = CreateOrFind(key, action, uid, "NetworkPolicy");
  if (created.kind == CreateOutcome::Kind::kTheirs) {
    spdlog::warn(
        "minicluster {}: a NetworkPolicy of that name that it does not "
        "control is in the way; its broker port stays open to the cluster",
        key);
  }
  return CreatedOrRetry(std::move(created), ReconcileResult::Done());
}

}  // namespace fcc::controller
