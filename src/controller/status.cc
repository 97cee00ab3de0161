#include "controller/status.h"

#include <algorithm>
#include <ctime>
#include <optional>

#include "controller/brokers.h"
#include "controller/desired.h"
#include "kube/informer.h"
#include "kube/object_meta.h"

namespace fcc::controller {
namespace {

using nlohmann::json;

constexpr char kJobUidLabel[] = "kueue.x-k8s.io/job-uid";

constexpr const char* kConditionTypes[] = {"Queued", "Running", "Succeeded",
                                           "Failed"};

using kube::ConditionTrue;
using kube::FindCondition;

// " on worker cluster <name>" when MultiKueue dispatched the Job.
std::string OnCluster(const WorkloadSummary& wl) {
  return wl.cluster_name.empty() ? "" : " on worker cluster " + wl.cluster_name;
}

// "; waiting for admission check multikueue (Pending: <message>)": what
// holds a Workload whose quota is reserved, e.g. MultiKueue looking for a
// worker with room.
std::string PendingChecks(const json& status) {
  const json& checks = kube::FieldAt(status, "admissionChecks");
  if (!checks.is_array()) return "";
  std::string text;
  for (const auto& check : checks) {
    const std::string& state = kube::StringAt(check, "state");
    if (state == "Ready") continue;
    text += (text.empty() ? "; waiting for admission check " : ", ") +
            kube::StringAt(check, "name") + " (" + state;
    if (const std::string& message = kube::StringAt(check, "message");
        !message.empty()) {
      text += ": " + message;
    }
    text += ")";
  }
  return text;
}

struct Verdict {
  State state;
  std::string reason;
  std::string message;
};

// Why the Job failed: an index failed (desired.cc, BrokerFailurePolicy),
// said in the MiniCluster's words when its pods show which and how, else
// the Job's own reason.
Verdict FailedVerdict(const MiniCluster& mc, const json& job,
                      const json& condition, const std::vector<json>* pods) {
  const std::string& reason = kube::StringAt(condition, "reason");
  if (reason == "MaxFailedIndexesExceeded" || reason == "FailedIndexes") {
    IndexFailure why = pods != nullptr
                           ? WhyAnIndexFailed(*pods, mc.spec.broker_restarts)
                           : IndexFailure{};
    if (why.reason.empty()) {
      // A deleted or evicted pod is gone once it stopped: the Job's failed
      // indexes still say which.
      why = WhyAFailedIndexIsGone(
          kube::StringAt(kube::FieldAt(job, "status"), "failedIndexes"),
          mc.spec.broker_restarts, mc.ephemeral());
    }
    if (!why.reason.empty()) {
      return {State::kFailed, std::move(why.reason), std::move(why.message)};
    }
  }
  return {State::kFailed, condition.value("reason", "JobFailed"),
          condition.value("message", "the Job failed")};
}

Verdict FromJob(const MiniCluster& mc, const json& job,
                const std::optional<WorkloadSummary>& wl,
                const std::vector<json>* pods) {
  for (const char* type : {"Failed", "FailureTarget"}) {
    if (ConditionTrue(job, type)) {
      return FailedVerdict(mc, job, *FindCondition(job, type), pods);
    }
  }
  // SuccessCriteriaMet comes first (index 0 succeeded); Complete follows
  // once the remaining pods are gone. Either means the instance is done.
  for (const char* type : {"Complete", "SuccessCriteriaMet"}) {
    if (ConditionTrue(job, type)) {
      const json* c = FindCondition(job, type);
      std::string reason = c->value("reason", "");
      return {State::kSucceeded, reason.empty() ? "JobComplete" : reason,
              "index 0 (rank 0) succeeded"};
    }
  }
  const json spec = job.value("spec", json::object());
  if (spec.value("suspend", false)) {
    if (wl) {
      if (wl->admitted) {
        return {State::kQueued, "Admitted",
                "admitted by ClusterQueue " + wl->cluster_queue +
                    OnCluster(*wl) + "; waiting for the Job to start"};
      }
      return {State::kQueued, wl->reason.empty() ? "Pending" : wl->reason,
              wl->message.empty() ? "waiting for Kueue to admit the Job"
                                  : wl->message};
    }
    const std::string queue = mc.QueueName();
    if (!queue.empty()) {
      return {State::kQueued, "WaitingForKueue",
              "waiting for Kueue to create and admit a Workload from "
              "LocalQueue " +
                  queue};
    }
    if (mc.spec.suspend) {
      return {State::kQueued, "Suspended",
              "spec.suspend is true; set it to false to start the MiniCluster"};
    }
    return {State::kQueued, "Starting", "the controller is starting the Job"};
  }
  const json status = job.value("status", json::object());
  const int active = status.value("active", 0);
  const int ready = status.value("ready", 0);
  const int admitted = AdmittedSize(mc, job);
  const std::string partial =
      admitted < mc.spec.size
          ? std::to_string(admitted) + " of " + std::to_string(mc.spec.size) +
                " brokers admitted (Kueue partial admission); "
          : "";
  return {State::kRunning, "JobRunning",
          partial + std::to_string(active) + " of " + std::to_string(admitted) +
              " broker pods active, " + std::to_string(ready) + " ready" +
              (wl ? OnCluster(*wl) : "")};
}

// A condition keeps the lastTransitionTime it had while its status stays.
void KeepTransitionTime(const json& previous_status, json& c) {
  const json& previous = kube::FieldAt(previous_status, "conditions");
  if (!previous.is_array()) return;
  for (const auto& p : previous) {
    if (kube::StringAt(p, "type") == c["type"].get<std::string>() &&
        kube::StringAt(p, "status") == c["status"].get<std::string>() &&
        p.contains("lastTransitionTime")) {
      c["lastTransitionTime"] = p["lastTransitionTime"];
    }
  }
}

json Conditions(const MiniCluster& mc, const Verdict& verdict,
                const std::string& now) {
  json conditions = json::array();
  const std::string state_name = StateName(verdict.state);
  for (const char* type : kConditionTypes) {
    const bool is_true = state_name == type;
    json c{{"type", type},
           {"status", is_true ? "True" : "False"},
           {"observedGeneration", mc.generation},
           {"reason", is_true ? verdict.reason : state_name},
           {"message",
            is_true ? verdict.message : "the MiniCluster is " + state_name},
           {"lastTransitionTime", now}};
    KeepTransitionTime(mc.status, c);
    conditions.push_back(std::move(c));
  }
  return conditions;
}

// A status condition of `status` (a MiniCluster's status object).
bool StatusConditionTrue(const json& status, const std::string& type) {
  const json& conditions = kube::FieldAt(status, "conditions");
  if (!conditions.is_array()) return false;
  for (const auto& c : conditions) {
    if (kube::StringAt(c, "type") == type)
      return kube::StringAt(c, "status") == "True";
  }
  return false;
}

// "; down: index 2 (evicted)", when the pods say which.
std::string DownText(const std::vector<json>* pods, int size) {
  if (pods == nullptr) return "";
  const std::string down = DownBrokers(*pods, size);
  return down.empty() ? "" : "; down: " + down;
}

// Degraded: Running with fewer brokers ready than spec.size after every
// broker was up once (not while the instance wires up); True until all are
// ready again, as a replaced broker rejoins.
json DegradedCondition(const MiniCluster& mc, const Verdict& verdict, int ready,
                       int admitted, const std::vector<json>* pods,
                       const std::string& now) {
  const json& previous = mc.status;
  const bool was_whole =
      previous.is_object() && previous.value("brokersReady", -1) == admitted;
  const bool degraded =
      verdict.state == State::kRunning && ready < admitted &&
      (was_whole || StatusConditionTrue(previous, "Degraded"));
  const std::string of_size =
      std::to_string(ready) + " of " + std::to_string(admitted);
  json c{
      {"type", "Degraded"},
      {"status", degraded ? "True" : "False"},
      {"observedGeneration", mc.generation},
      {"reason", degraded                           ? "BrokerLost"
                 : verdict.state == State::kRunning ? "Brokers"
                                                    : StateName(verdict.state)},
      {"message",
       degraded ? of_size + " brokers ready" + DownText(pods, admitted) +
                      ": a lost broker pod is replaced under its index and "
                      "rejoins the instance; a rank Flux cannot use counts "
                      "again once it can"
       : verdict.state == State::kRunning
           ? of_size + " brokers ready"
           : "the MiniCluster is " + StateName(verdict.state)},
      {"lastTransitionTime", now}};
  KeepTransitionTime(previous, c);
  return c;
}

// LeadReplaced: a persistent MiniCluster's lead pod was replaced (deleted,
// evicted, its node lost, or its broker crashing past its restarts), and
// what the new lead kept. Absent until it happens; then the lead's pod
// says so for the rest of the MiniCluster's life.
std::optional<json> LeadReplacedCondition(const MiniCluster& mc,
                                          const json& job,
                                          const std::vector<json>* pods,
                                          const std::string& now) {
  if (mc.ephemeral() || pods == nullptr) return std::nullopt;
  const int replaced = LeadReplacements(*pods);
  if (replaced == 0) return std::nullopt;
  const std::string claim = StateClaimOfJob(job);
  const std::string lost = "the lead pod was replaced (index 0 lost " +
                           std::to_string(replaced) +
                           (replaced == 1 ? " time); " : " times); ");
  json c{{"type", "LeadReplaced"},
         {"status", "True"},
         {"observedGeneration", mc.generation},
         {"reason", claim.empty() ? "QueueLost" : "QueueRestored"},
         {"message",
          claim.empty()
              ? lost + "a new, empty Flux instance started and the followers "
                       "rejoin it: jobs queued or run before are gone (set "
                       "spec.flux.state to keep them)"
              : lost + "rank 0 restarted from spec.flux.state (claim " + claim +
                    "): pending jobs, queues and job history were kept, all "
                    "but the last second before the loss; jobs that were "
                    "running ended with an exception"},
         {"lastTransitionTime", now}};
  KeepTransitionTime(mc.status, c);
  return c;
}

}  // namespace

std::string StateName(State state) {
  switch (state) {
    case State::kPending:
      return "Pending";
    case State::kQueued:
      return "Queued";
    case State::kRunning:
      return "Running";
    case State::kSucceeded:
      return "Succeeded";
    case State::kFailed:
      return "Failed";
  }
  return "Unknown";
}

WorkloadSummary SummarizeWorkload(const json& workload) {
  WorkloadSummary s;
  s.name = kube::ObjectMeta(workload).name();
  const json status = workload.value("status", json::object());
  s.cluster_queue =
      status.value("admission", json::object()).value("clusterQueue", "");
  s.cluster_name = kube::StringAt(status, "clusterName");
  s.admitted = ConditionTrue(workload, "Admitted");
  // The most telling condition first: an eviction explains a re-queue,
  // QuotaReserved=False explains a wait ("insufficient unused quota ...").
  for (const char* type : {"Evicted", "Preempted"}) {
    if (ConditionTrue(workload, type)) {
      const json* c = FindCondition(workload, type);
      s.reason = c->value("reason", type);
      s.message = c->value("message", "");
      return s;
    }
  }
  auto take = [&s](const json* c, const char* fallback_reason) {
    s.reason =
        c != nullptr ? c->value("reason", fallback_reason) : fallback_reason;
    s.message = c != nullptr ? c->value("message", "") : "";
  };
  if (s.admitted) {
    take(FindCondition(workload, "Admitted"), "Admitted");
  } else if (const json* quota = FindCondition(workload, "QuotaReserved");
             quota != nullptr && quota->value("status", "") != "True") {
    take(quota, "Pending");  // e.g. insufficient unused quota
  } else if (quota != nullptr) {
    // Quota reserved, admission checks still pending.
    const json* admitted = FindCondition(workload, "Admitted");
    take(admitted != nullptr ? admitted : quota, "QuotaReserved");
    s.message += PendingChecks(status);
  } else {
    take(nullptr, "Pending");
  }
  return s;
}

void TrimWorkloadForCache(json& workload) {
  kube::TrimForCache(workload);
  workload.erase("spec");
  auto status = workload.find("status");
  if (status == workload.end() || !status->is_object()) return;
  json kept = json::object();
  if (auto c = status->find("conditions"); c != status->end()) {
    kept["conditions"] = std::move(*c);
  }
  const json& queue =
      kube::FieldAt(kube::FieldAt(*status, "admission"), "clusterQueue");
  if (queue.is_string()) kept["admission"] = {{"clusterQueue", queue}};
  if (auto c = status->find("clusterName"); c != status->end()) {
    kept["clusterName"] = std::move(*c);
  }
  if (auto checks = status->find("admissionChecks");
      checks != status->end() && checks->is_array()) {
    kept["admissionChecks"] = json::array();
    for (const auto& check : *checks) {
      json small = json::object();
      for (const char* key : {"name", "state", "message"}) {
        if (check.contains(key)) small[key] = check[key];
      }
      kept["admissionChecks"].push_back(std::move(small));
    }
  }
  *status = std::move(kept);
}

std::vector<std::string> JobUidsOfWorkload(const json& workload) {
  const kube::ObjectMeta meta(workload);
  std::vector<std::string> uids;
  for (const json& ref : meta.owner_references()) {
    const std::string& uid = kube::StringAt(ref, "uid");
    if (kube::StringAt(ref, "kind") == "Job" && !uid.empty())
      uids.push_back(uid);
  }
  const std::string& labelled = meta.label(kJobUidLabel);
  if (!labelled.empty() &&
      std::find(uids.begin(), uids.end(), labelled) == uids.end())
    uids.push_back(labelled);
  return uids;
}

const json* FindWorkloadForJob(const std::vector<json>& workloads,
                               const json& job) {
  const std::string& uid = kube::ObjectMeta(job).uid();
  if (uid.empty()) return nullptr;
  for (const auto& wl : workloads) {
    const auto uids = JobUidsOfWorkload(wl);
    if (std::find(uids.begin(), uids.end(), uid) != uids.end()) return &wl;
  }
  return nullptr;
}

json ComputeStatus(const MiniCluster& mc, const json* job, const json* workload,
                   const std::string& now, const std::vector<json>* pods) {
  std::optional<WorkloadSummary> wl;
  if (workload != nullptr) wl = SummarizeWorkload(*workload);
  Verdict verdict{State::kPending, "CreatingJob",
                  "the controller is creating the Job"};
  if (job != nullptr) verdict = FromJob(mc, *job, wl, pods);

  json status{{"observedGeneration", mc.generation},
              {"state", StateName(verdict.state)},
              {"jobName", JobName(mc)},
              {"conditions", Conditions(mc, verdict, now)}};
  int ready = 0;
  int admitted = mc.spec.size;
  if (job != nullptr && verdict.state == State::kRunning) {
    const json& count = kube::FieldAt(kube::FieldAt(*job, "status"), "ready");
    ready = count.is_number_integer() ? count.get<int>() : 0;
    admitted = AdmittedSize(mc, *job);
    status["brokersReady"] = ready;
    status["brokersAdmitted"] = admitted;
    status["brokers"] =
        std::to_string(ready) + "/" + std::to_string(admitted) +
        (admitted < mc.spec.size ? " (of " + std::to_string(mc.spec.size) + ")"
                                 : "");
  }
  status["conditions"].push_back(
      DegradedCondition(mc, verdict, ready, admitted, pods, now));
  if (job != nullptr) {
    if (auto lead = LeadReplacedCondition(mc, *job, pods, now); lead) {
      status["conditions"].push_back(std::move(*lead));
    }
    if (json resources = FluxResourcesOfJob(*job); !resources.is_null()) {
      status["fluxResources"] = std::move(resources);
    }
    // Pinned at the Job's create: what operators check before retiring a key.
    if (std::string key_id = KeyIdOfJob(*job); !key_id.empty()) {
      status["keyId"] = std::move(key_id);
    }
  }
  if (wl) {
    status["workload"] = {{"name", wl->name},
                          {"admitted", wl->admitted},
                          {"clusterQueue", wl->cluster_queue},
                          {"reason", wl->reason},
                          {"message", wl->message}};
    if (!wl->cluster_name.empty()) {
      status["workload"]["clusterName"] = wl->cluster_name;
    }
  }
  return status;
}

json InvalidSpecStatus(const MiniCluster& mc, const std::string& errors,
                       const std::string& now) {
  Verdict verdict{State::kFailed, "InvalidSpec", errors};
  json conditions = Conditions(mc, verdict, now);
  conditions.push_back(
      DegradedCondition(mc, verdict, 0, mc.spec.size, nullptr, now));
  return json{{"observedGeneration", mc.generation},
              {"state", StateName(State::kFailed)},
              {"conditions", std::move(conditions)}};
}

}  // namespace fcc::controller
