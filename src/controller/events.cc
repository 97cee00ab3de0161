#include "controller/events.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <exception>
#include <optional>

#include "common/text.h"
#include "controller/minicluster.h"
#include "controller/plan.h"
#include "kube/api_path.h"
#include "kube/object_meta.h"
#include "kube/time_format.h"

namespace fcc::controller {
namespace {

using nlohmann::json;

// events.k8s.io/v1 refuses a longer reportingInstance.
constexpr size_t kMaxReportingInstance = 128;

// The state and its condition's reason and message. Pending has no
// condition of its own: status.h gives its reason (CreatingJob,
// JobNameTaken, ...) to the first condition, Queued, which is False.
struct Phase {
  std::string state, reason, message;
};

Phase PhaseOf(const json& status) {
  Phase p;
  if (!status.is_object()) return p;
  p.state = kube::StringAt(status, "state");
  const std::string& type = p.state == "Pending" ? "Queued" : p.state;
  const json& conditions = kube::FieldAt(status, "conditions");
  if (!conditions.is_array()) return p;
  for (const json& c : conditions) {
    if (kube::StringAt(c, "type") == type) {
      p.reason = kube::StringAt(c, "reason");
      p.message = kube::StringAt(c, "message");
    }
  }
  return p;
}

// A refusal: the controller will not go on until the user acts.
bool Refusal(const Phase& p) {
  return (p.state == "Pending" && p.reason.ends_with("NameTaken")) ||
         (p.state == "Failed" && p.reason == "InvalidSpec");
}

std::string Truncate(const std::string& note) {
  return std::string(common::Utf8Prefix(note, kMaxEventNote));
}

// What Kueue's Workload says, as " (<reason>: <message>)", or "".
std::string WorkloadDetail(const json& status) {
  const json& wl = kube::FieldAt(status, "workload");
  const std::string& reason = kube::StringAt(wl, "reason");
  if (reason.empty()) return "";
  const std::string& message = kube::StringAt(wl, "message");
  return " (" + reason + (message.empty() ? "" : ": " + message) + ")";
}

EventSpec QueuedEvent(const Phase& before, const Phase& after,
                      const json& status, bool queued) {
  if (before.state != "Running") {
    return {"Normal", "Queued", "Reconcile", after.message};
  }
  // Kueue's eviction reason for spec.active=false, which it sets itself
  // when a Workload's maximum execution time runs out: no re-admission.
  if (queued && kube::StringAt(kube::FieldAt(status, "workload"), "reason") ==
                    "Deactivated") {
    return {"Warning", "Deactivated", "Reconcile",
            "Kueue deactivated the Workload; its pods are deleted and it is "
            "not admitted again unless its spec.active is set back to true" +
                WorkloadDetail(status)};
  }
  if (queued) {
    return {"Normal", "Preempted", "Reconcile",
            "Kueue suspended the running Job; its pods are deleted and it "
            "waits to be admitted again" +
                WorkloadDetail(status)};
  }
  return {"Normal", "Suspended", "Reconcile", after.message};
}

EventSpec RunningEvent(const json& status, bool queued) {
  if (!queued) {
    return {"Normal", "Started", "Reconcile", "the Job is unsuspended"};
  }
  const json& workload = kube::FieldAt(status, "workload");
  const std::string& cq = kube::StringAt(workload, "clusterQueue");
  // MultiKueue: the worker cluster that runs it.
  const std::string& worker = kube::StringAt(workload, "clusterName");
  return {
      "Normal", "Admitted", "Reconcile",
      "Kueue admitted the Job" +
          (cq.empty() ? std::string() : " to ClusterQueue " + cq) +
          (worker.empty() ? std::string() : " on worker cluster " + worker) +
          " and unsuspended it"};
}

std::vector<EventSpec> EventsFor(const Phase& before, const Phase& after,
                                 const json& status, bool queued) {
  if (after.state == "Pending") {
    if (!Refusal(after)) return {};
    return {{"Warning", after.reason, "Create", after.message}};
  }
  if (after.state == "Queued")
    return {QueuedEvent(before, after, status, queued)};
  if (after.state == "Running") {
    std::vector<EventSpec> events{RunningEvent(status, queued)};
    if (kube::StringAt(kube::FieldAt(status, "fluxResources"), "source") ==
        "node") {
      events.push_back(
          {"Warning", "NoResourceRequest", "Reconcile",
           "the broker container has no CPU limit or request, so each broker "
           "gives Flux every core and GPU of its node (hwloc), not what was "
           "admitted; set spec.resources.limits.cpu (and nvidia.com/gpu or "
           "amd.com/gpu) to what one broker may use"});
    }
    return events;
  }
  if (after.state == "Succeeded") {
    return {{"Normal", "Completed", "Reconcile",
             after.message + " (" + after.reason + ")"}};
  }
  if (after.state == "Failed") {
    if (after.reason == "InvalidSpec")
      return {{"Warning", "InvalidSpec", "Validate", after.message}};
    return {{"Warning", "Failed", "Reconcile",
             after.reason + ": " + after.message}};
  }
  return {};
}

const json* ConditionOf(const json& status, const char* type) {
  const json& conditions = kube::FieldAt(status, "conditions");
  if (!conditions.is_array()) return nullptr;
  for (const json& c : conditions) {
    if (kube::StringAt(c, "type") == type) return &c;
  }
  return nullptr;
}

// The Degraded condition (status.h): true while a broker is lost.
const json* DegradedOf(const json& status) {
  return ConditionOf(status, "Degraded");
}

// A persistent lead's pod replaced, again: the condition's message counts
// the replacements.
std::optional<EventSpec> LeadEvent(const json& before, const json& after) {
  const json* is = ConditionOf(after, "LeadReplaced");
  if (is == nullptr) return std::nullopt;
  const json* was = ConditionOf(before, "LeadReplaced");
  const std::string& message = kube::StringAt(*is, "message");
  if (was != nullptr && kube::StringAt(*was, "message") == message) {
    return std::nullopt;
  }
  const std::string& reason = kube::StringAt(*is, "reason");
  return EventSpec{reason == "QueueLost" ? "Warning" : "Normal", reason,
                   "Reconcile", message};
}

bool IsDegraded(const json& status) {
  const json* c = DegradedOf(status);
  return c != nullptr && kube::StringAt(*c, "status") == "True";
}

// A broker lost while Running, and all of them back.
std::optional<EventSpec> BrokerEvent(const json& before, const json& after) {
  const bool was = IsDegraded(before), is = IsDegraded(after);
  if (!was && is) {
    return EventSpec{"Warning", "BrokerLost", "WaitForRejoin",
                     kube::StringAt(*DegradedOf(after), "message")};
  }
  if (was && !is && kube::StringAt(after, "state") == "Running") {
    return EventSpec{"Normal", "BrokersRejoined", "Reconcile",
                     "all " + kube::FieldAt(after, "brokersReady").dump() +
                         " brokers ready again"};
  }
  return std::nullopt;
}

}  // namespace

std::vector<EventSpec> StatusEvents(const json& before, const json& after,
                                    bool queued) {
  const Phase b = PhaseOf(before);
  const Phase a = PhaseOf(after);
  if (a.state.empty()) return {};
  std::vector<EventSpec> conditions;
  for (auto event : {BrokerEvent(before, after), LeadEvent(before, after)}) {
    if (!event) continue;
    event->note = Truncate(event->note);
    conditions.push_back(std::move(*event));
  }
  if (!conditions.empty()) return conditions;
  // Within one state only a new refusal is news (reasons such as
  // SuccessCriteriaMet -> Complete, or Kueue's Pending -> Admitted while
  // still suspended, are steps of the same state).
  const bool new_refusal =
      Refusal(a) && (a.reason != b.reason || a.message != b.message);
  if (a.state == b.state && !new_refusal) return {};
  auto events = EventsFor(b, a, after, queued);
  for (EventSpec& e : events) e.note = Truncate(e.note);
  return events;
}

json EventRelevantStatus(const json& status) {
  const Phase p = PhaseOf(status);
  if (p.state.empty()) return json::object();
  json kept = {{"state", p.state}};
  if (const json* degraded = DegradedOf(status); degraded != nullptr) {
    kept["conditions"] = {{{"type", "Degraded"},
                           {"status", kube::StringAt(*degraded, "status")}}};
  }
  if (const json* lead = ConditionOf(status, "LeadReplaced"); lead != nullptr) {
    kept["conditions"].push_back(
        {{"type", "LeadReplaced"},
         {"status", kube::StringAt(*lead, "status")},
         {"reason", kube::StringAt(*lead, "reason")},
         {"message", kube::StringAt(*lead, "message")}});
  }
  if (p.reason.empty() && p.message.empty()) return kept;
  kept["conditions"].push_back(
      {{"type", p.state == "Pending" ? "Queued" : p.state},
       {"reason", p.reason},
       {"message", p.message}});
  return kept;
}

json EventObject(const json& regarding, const EventSpec& event,
                 const std::string& reporting_instance,
                 const std::string& event_time, const std::string& unique) {
  const kube::ObjectMeta meta(regarding);
  return json{{"apiVersion", "events.k8s.io/v1"},
              {"kind", "Event"},
              {"metadata",
               {{"name", meta.name() + "." + unique},
                {"namespace", meta.namespace_name()}}},
              {"eventTime", event_time},
              {"reportingController", kReportingController},
              {"reportingInstance",
               reporting_instance.substr(0, kMaxReportingInstance)},
              {"action", event.action},
              {"reason", event.reason},
              {"type", event.type},
              {"note", Truncate(event.note)},
              {"regarding",
               {{"apiVersion", kApiVersion},
                {"kind", kKind},
                {"name", meta.name()},
                {"namespace", meta.namespace_name()},
                {"uid", meta.uid()},
                {"resourceVersion", meta.resource_version()}}}};
}

void KubeEventRecorder::Record(const json& regarding, const EventSpec& event) {
  Send(regarding, event, std::chrono::system_clock::now());
}

void KubeEventRecorder::Send(const json& regarding, const EventSpec& event,
                             std::chrono::system_clock::time_point when) {
  const std::string key = kube::ObjectKey(regarding);
  try {
    const auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           when.time_since_epoch())
                           .count();
    const json body =
        EventObject(regarding, event, instance_, kube::FormatMicroTime(when),
                    fmt::format("{:x}", nanos));
    const kube::HttpResponse response = api_.Create(
        kube::CollectionPath("events.k8s.io/v1", "events",
                             kube::ObjectMeta(regarding).namespace_name()),
        body, kFieldManager);
    if (response.ok()) {
      spdlog::debug("minicluster {}: event {}", key, event.reason);
    } else {
      spdlog::warn("minicluster {}: event {} not recorded: {}", key,
                   event.reason, response.Describe());
    }
  } catch (const std::exception& e) {
    spdlog::warn("minicluster {}: event {} not recorded: {}", key, event.reason,
                 e.what());
  }
}

json EventReference(const json& object) {
  json metadata = json::object();
  const json& from = kube::FieldAt(object, "metadata");
  for (const char* field : {"name", "namespace", "uid", "resourceVersion"}) {
    if (from.contains(field)) metadata[field] = from[field];
  }
  json ref = {{"metadata", std::move(metadata)}};
  for (const char* field : {"apiVersion", "kind"}) {
    if (object.contains(field)) ref[field] = object[field];
  }
  return ref;
}

AsyncEventRecorder::AsyncEventRecorder(KubeEventRecorder& sink,
                                       size_t max_pending,
                                       std::chrono::milliseconds drain)
    : sink_(sink),
      max_pending_(max_pending),
      drain_(drain),
      thread_([this] { Run(); }) {}

AsyncEventRecorder::~AsyncEventRecorder() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void AsyncEventRecorder::Record(const json& regarding, const EventSpec& event) {
  Pending pending{EventReference(regarding), event,
                  std::chrono::system_clock::now()};
  {
    std::lock_guard lock(mu_);
    if (pending_.size() < max_pending_) {
      pending_.push_back(std::move(pending));
      cv_.notify_one();
      return;
    }
  }
  spdlog::warn("minicluster {}: event {} dropped: {} events wait already",
               kube::ObjectKey(regarding), event.reason, max_pending_);
}

void AsyncEventRecorder::Run() {
  std::unique_lock lock(mu_);
  std::optional<std::chrono::steady_clock::time_point> deadline;
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
    if (stopping_ && !deadline)
      deadline = std::chrono::steady_clock::now() + drain_;
    if (pending_.empty()) return;  // stopping, nothing left
    if (deadline && std::chrono::steady_clock::now() >= *deadline) {
      spdlog::warn("{} events dropped at shutdown", pending_.size());
      return;
    }
    Pending next = std::move(pending_.front());
    pending_.pop_front();
    lock.unlock();
    sink_.Send(next.regarding, next.event, next.when);
    lock.lock();
  }
}

json WrittenStatuses::Before(const std::string& key, const std::string& uid,
                             const json& cached) const {
  std::lock_guard lock(mu_);
  auto it = written_.find(key);
  if (it == written_.end() || it->second.first != uid) return cached;
  return it->second.second;
}

void WrittenStatuses::Wrote(const std::string& key, const std::string& uid,
                            const json& status) {
  json kept = EventRelevantStatus(status);
  std::lock_guard lock(mu_);
  written_[key] = {uid, std::move(kept)};
}

void WrittenStatuses::Forget(const std::string& key) {
  std::lock_guard lock(mu_);
  written_.erase(key);
}

}  // namespace fcc::controller
