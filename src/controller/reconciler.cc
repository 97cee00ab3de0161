#include "reconciler.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>

#include "status.h"

namespace fcc::controller {
namespace {

using nlohmann::json;

// The part of a desired object the API server echoes back unchanged
// (list items carry no apiVersion/kind; the server adds defaults).
json Comparable(const json& desired) {
  json out{{"metadata",
            {{"labels", desired["metadata"]["labels"]},
             {"ownerReferences", desired["metadata"]["ownerReferences"]}}}};
  if (desired.contains("spec")) out["spec"] = desired["spec"];
  return out;
}

bool ControlledBy(const json& object, const std::string& uid) {
  for (const auto& ref : object.value("metadata", json::object())
                             .value("ownerReferences", json::array())) {
    if (ref.value("controller", false) && ref.value("uid", "") == uid)
      return true;
  }
  return false;
}

bool JobFinished(const json& job) {
  for (const auto& c :
       job.value("status", json::object()).value("conditions", json::array())) {
    const std::string type = c.value("type", "");
    if ((type == "Complete" || type == "Failed") &&
        c.value("status", "") == "True") {
      return true;
    }
  }
  return false;
}

Action StatusAction(const MiniCluster& mc, json status) {
  return Action{
      Action::Kind::kApplyStatus,
      ObjectPath(kApiVersion, kPlural, mc.namespace_, mc.name, "status"),
      json{{"apiVersion", kApiVersion},
           {"kind", kKind},
           {"metadata", {{"name", mc.name}, {"namespace", mc.namespace_}}},
           {"status", std::move(status)}},
      kFieldManager, true};
}

}  // namespace

void TrimJobForCache(json& job) {
  TrimForCache(job);
  auto spec = job.find("spec");
  if (spec != job.end() && spec->is_object()) spec->erase("template");
}

std::string ActionName(Action::Kind kind) {
  switch (kind) {
    case Action::Kind::kApplyService:
      return "apply Service";
    case Action::Kind::kCreateJob:
      return "create Job";
    case Action::Kind::kApplyJob:
      return "apply Job metadata";
    case Action::Kind::kSetJobSuspend:
      return "set Job suspend";
    case Action::Kind::kApplyStatus:
      return "apply status";
  }
  return "unknown";
}

std::vector<Action> PlanReconcile(const Observed& observed,
                                  const DesiredOptions& options,
                                  const std::string& now) {
  std::vector<Action> actions;
  if (observed.minicluster == nullptr) return actions;  // deleted: GC cleans up
  const json& object = *observed.minicluster;
  if (object.value("metadata", json::object()).contains("deletionTimestamp")) {
    return actions;
  }
  ParseResult parsed = ParseMiniCluster(object);
  if (!parsed.minicluster) return actions;
  const MiniCluster& mc = *parsed.minicluster;
  if (!parsed.ok()) {
    json status = InvalidSpecStatus(mc, parsed.ErrorText(), now);
    if (status != mc.status)
      actions.push_back(StatusAction(mc, std::move(status)));
    return actions;
  }

  const json service = DesiredService(mc, options);
  if (observed.service == nullptr ||
      !IsSubset(Comparable(service), *observed.service)) {
    actions.push_back(
        {Action::Kind::kApplyService,
         ObjectPath("v1", "services", mc.namespace_, ServiceName(mc)), service,
         kFieldManager, true});
  }

  const json* job = observed.job;
  if (job != nullptr && !ControlledBy(*job, mc.uid)) {
    // A Job of that name that is not ours: a user's, or the previous
    // MiniCluster of this name still being garbage-collected.
    json status = ComputeStatus(mc, nullptr, nullptr, now);
    status["conditions"][0]["reason"] = "JobNameTaken";
    status["conditions"][0]["message"] =
        "a Job named " + JobName(mc) +
        " exists that this MiniCluster does not control; waiting for it to be "
        "deleted";
    if (status != mc.status)
      actions.push_back(StatusAction(mc, std::move(status)));
    return actions;
  }
  if (job == nullptr) {
    actions.push_back({Action::Kind::kCreateJob,
                       CollectionPath("batch/v1", "jobs", mc.namespace_),
                       DesiredJob(mc, options), kCreateFieldManager, false});
  } else {
    const json metadata = JobApplyBody(mc);
    if (!IsSubset(Comparable(metadata), *job)) {
      actions.push_back(
          {Action::Kind::kApplyJob,
           ObjectPath("batch/v1", "jobs", mc.namespace_, JobName(mc)), metadata,
           kFieldManager, true});
    }
    const bool queued =
        !mc.QueueName().empty() || job->value("metadata", json::object())
                                       .value("labels", json::object())
                                       .contains(kQueueNameLabel);
    const bool suspended =
        job->value("spec", json::object()).value("suspend", false);
    if (!queued && !JobFinished(*job) && suspended != mc.spec.suspend) {
      actions.push_back(
          {Action::Kind::kSetJobSuspend,
           ObjectPath("batch/v1", "jobs", mc.namespace_, JobName(mc)),
           JobSuspendApplyBody(mc, mc.spec.suspend), kLauncherFieldManager,
           true});
    }
  }

  json status = ComputeStatus(mc, job, observed.workload, now);
  if (status != mc.status)
    actions.push_back(StatusAction(mc, std::move(status)));
  return actions;
}

bool Reconciler::Reconcile(const std::string& key) {
  const auto mc = caches_.miniclusters.Get(key);
  if (!mc) return true;
  const std::string ns =
      mc->value("metadata", json::object()).value("namespace", "");
  const std::string name =
      mc->value("metadata", json::object()).value("name", "");
  // Service and Job share the MiniCluster's name (desired.h).
  const auto service = caches_.services.Get(ns + "/" + name);
  const auto job = caches_.jobs.Get(ns + "/" + name);
  std::optional<json> workload;
  if (job) {
    const std::string job_uid =
        job->value("metadata", json::object()).value("uid", "");
    auto owned = caches_.workloads.ByControllerUid(job_uid);
    if (!owned.empty()) workload = owned.front();
  }
  Observed observed{&*mc, service ? &*service : nullptr, job ? &*job : nullptr,
                    workload ? &*workload : nullptr};
  const std::string uid =
      mc->value("metadata", json::object()).value("uid", "");
  const std::string now = FormatTime(std::chrono::system_clock::now());
  const auto actions = PlanReconcile(observed, options_, now);

  bool ok = true;
  // The Job this reconcile just created, as the API server returned it.
  std::optional<json> created_job;
  for (const auto& planned : actions) {
    const Action* chosen = &planned;
    std::optional<Action> fresh_status;
    if (planned.kind == Action::Kind::kApplyStatus && created_job) {
      // The plan's status was computed without the Job ("CreatingJob"),
      // which the next reconcile would overwrite at once: compute it from
      // the created Job instead, saving a status write per new MiniCluster.
      Observed with_job = observed;
      with_job.job = &*created_job;
      for (auto& a : PlanReconcile(with_job, options_, now)) {
        if (a.kind == Action::Kind::kApplyStatus) fresh_status = std::move(a);
      }
      if (!fresh_status) continue;  // already what the MiniCluster shows
      chosen = &*fresh_status;
    }
    const Action& action = *chosen;
    HttpResponse response =
        action.kind == Action::Kind::kCreateJob
            ? api_.Create(action.path, action.body, action.field_manager)
            : api_.Apply(action.path, action.body, action.field_manager,
                         action.force);
    if (response.ok()) {
      spdlog::info("minicluster {}: {}", key, ActionName(action.kind));
      if (action.kind == Action::Kind::kCreateJob) {
        json job = json::parse(response.body, nullptr, false);
        // Only a Job this MiniCluster controls (a test double may answer
        // with anything).
        if (job.is_object() && ControlledBy(job, uid)) {
          TrimJobForCache(job);
          created_job = std::move(job);
        }
      }
      continue;
    }
    if (action.kind == Action::Kind::kCreateJob && response.status == 409) {
      // Either we created it meanwhile (the Job watch brings it to the
      // cache), or a Job of that name without our label is in the way: the
      // label-filtered cache never sees it, so look it up here.
      HttpResponse got = api_.Get(action.path + "/" + name);  // Job = MC name
      json existing = json::parse(got.body, nullptr, false);
      if (!got.ok() || !existing.is_object()) {
        spdlog::warn("minicluster {}: create Job: 409, then get: {}", key,
                     got.Describe());
        return false;
      }
      if (ControlledBy(existing, uid)) continue;
      // Plan again with the Job that is in the way: that gives the
      // JobNameTaken status, instead of the Pending one planned above.
      Observed blocked = observed;
      blocked.job = &existing;
      for (const auto& a : PlanReconcile(blocked, options_, now)) {
        if (a.kind != Action::Kind::kApplyStatus) continue;
        HttpResponse r = api_.Apply(a.path, a.body, a.field_manager, a.force);
        if (!r.ok() && r.status != 404)
          spdlog::warn("minicluster {}: apply status failed: {}", key,
                       r.Describe());
      }
      spdlog::info(
          "minicluster {}: a Job of that name exists that it does not "
          "control; retrying",
          key);
      return false;  // retried with back-off until the name is free
    }
    if (action.kind == Action::Kind::kApplyStatus && response.status == 404) {
      continue;  // the MiniCluster was deleted meanwhile
    }
    spdlog::warn("minicluster {}: {} failed: {}", key, ActionName(action.kind),
                 response.Describe());
    ok = false;
  }
  return ok;
}

}  // namespace fcc::controller
