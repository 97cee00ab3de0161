#include "controller/events.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "controller/reconciler.h"
#include "controller/status.h"
#include "kube/object_meta.h"
#include "test_objects.h"

namespace fcc::controller {
namespace {

using nlohmann::json;
using testing::MiniClusterObject;

// A status as status.h writes it: `state` with its condition True; for
// Pending, which has none, its reason and message on Queued (False).
json Status(const std::string& state, const std::string& reason,
            const std::string& message = "msg") {
  json conditions = json::array();
  for (const char* type : {"Queued", "Running", "Succeeded", "Failed"}) {
    const bool is_true = state == type;
    const bool has_reason =
        is_true || (state == "Pending" && std::string(type) == "Queued");
    conditions.push_back({{"type", type},
                          {"status", is_true ? "True" : "False"},
                          {"reason", has_reason ? reason : state},
                          {"message", has_reason ? message : "other"}});
  }
  return {{"state", state}, {"conditions", conditions}};
}

std::vector<std::string> Reasons(const std::vector<EventSpec>& events) {
  std::vector<std::string> reasons;
  for (const auto& e : events) reasons.push_back(e.reason);
  return reasons;
}

using Strings = std::vector<std::string>;

TEST(StatusEvents, NothingForANewMiniClusterBeingCreated) {
  EXPECT_TRUE(
      StatusEvents(json(), Status("Pending", "CreatingJob"), false).empty());
}

TEST(StatusEvents, NameTakenIsAWarningOncePerNewRefusal) {
  const json creating = Status("Pending", "CreatingJob");
  const json job_taken = Status("Pending", "JobNameTaken", "a Job named x");
  const auto events = StatusEvents(creating, job_taken, false);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0],
            (EventSpec{"Warning", "JobNameTaken", "Create", "a Job named x"}));
  EXPECT_TRUE(StatusEvents(job_taken, job_taken, false).empty());
  EXPECT_EQ(Reasons(StatusEvents(json(), job_taken, false)),
            Strings{"JobNameTaken"});
  EXPECT_EQ(Reasons(StatusEvents(job_taken,
                                 Status("Pending", "ServiceNameTaken"), false)),
            Strings{"ServiceNameTaken"});
  // Freed: the Job is being created, nothing to report yet.
  EXPECT_TRUE(StatusEvents(job_taken, creating, false).empty());
}

TEST(StatusEvents, InvalidSpecIsAWarningAgainOnlyForNewErrors) {
  const json invalid = Status("Failed", "InvalidSpec", "spec.size: bad");
  const auto events = StatusEvents(json(), invalid, false);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], (EventSpec{"Warning", "InvalidSpec", "Validate",
                                  "spec.size: bad"}));
  EXPECT_TRUE(StatusEvents(invalid, invalid, false).empty());
  EXPECT_EQ(
      Reasons(StatusEvents(
          invalid, Status("Failed", "InvalidSpec", "spec.image: bad"), false)),
      Strings{"InvalidSpec"});
}

TEST(StatusEvents, QueuedThenAdmittedByKueue) {
  const json waiting = Status("Queued", "WaitingForKueue", "waiting");
  EXPECT_EQ(
      StatusEvents(Status("Pending", "CreatingJob"), waiting, true),
      (std::vector<EventSpec>{{"Normal", "Queued", "Reconcile", "waiting"}}));
  // Reasons within Queued (Kueue's Pending, then Admitted while the Job is
  // still suspended) are steps of one state.
  json admitted_suspended = Status("Queued", "Admitted");
  EXPECT_TRUE(StatusEvents(waiting, admitted_suspended, true).empty());
  json running = Status("Running", "JobRunning");
  running["workload"] = {{"admitted", true}, {"clusterQueue", "cq"}};
  const auto events = StatusEvents(admitted_suspended, running, true);
  ASSERT_EQ(Reasons(events), Strings{"Admitted"});
  EXPECT_EQ(events[0].type, "Normal");
  EXPECT_EQ(events[0].note,
            "Kueue admitted the Job to ClusterQueue cq and unsuspended it");
  // MultiKueue: the event names the worker that runs it.
  running["workload"]["clusterName"] = "worker1";
  EXPECT_EQ(StatusEvents(admitted_suspended, running, true)[0].note,
            "Kueue admitted the Job to ClusterQueue cq on worker cluster "
            "worker1 and unsuspended it");
  // The message (active/ready pods) changes while it runs: no events.
  EXPECT_TRUE(
      StatusEvents(running, Status("Running", "JobRunning", "2 of 2"), true)
          .empty());
}

json Degraded(json status, bool degraded, int ready) {
  status["brokersReady"] = ready;
  status["conditions"].push_back(
      {{"type", "Degraded"},
       {"status", degraded ? "True" : "False"},
       {"reason", degraded ? "BrokerLost" : "Brokers"},
       {"message", std::to_string(ready) + " of 4 brokers ready"}});
  return status;
}

// One Warning when a broker is lost, one Normal when all are back; a
// MiniCluster that fails while degraded says Failed, not rejoined.
TEST(StatusEvents, BrokerLostAndRejoined) {
  const json whole = Degraded(Status("Running", "JobRunning"), false, 4);
  const json lost = Degraded(Status("Running", "JobRunning"), true, 3);
  const auto events = StatusEvents(whole, lost, false);
  EXPECT_EQ(Reasons(events), Strings{"BrokerLost"});
  EXPECT_EQ(events[0].type, "Warning");
  EXPECT_EQ(events[0].note, "3 of 4 brokers ready");
  EXPECT_EQ(Reasons(StatusEvents(lost, lost, false)), Strings{});
  EXPECT_EQ(Reasons(StatusEvents(lost, whole, false)),
            Strings{"BrokersRejoined"});
  EXPECT_EQ(Reasons(StatusEvents(
                lost, Degraded(Status("Failed", "PodFailurePolicy"), false, 0),
                false)),
            Strings{"Failed"});
  EXPECT_EQ(Reasons(StatusEvents(EventRelevantStatus(whole), lost, false)),
            Strings{"BrokerLost"});
}

// A persistent lead's pod replaced: one event each time (the message
// counts them), a warning when the queue was lost.
TEST(StatusEvents, LeadReplacedOncePerReplacement) {
  const json running = Status("Running", "JobRunning");
  auto replaced = [&](const char* reason, const char* message) {
    json status = running;
    status["conditions"].push_back({{"type", "LeadReplaced"},
                                    {"status", "True"},
                                    {"reason", reason},
                                    {"message", message}});
    return status;
  };
  const json once = replaced("QueueLost", "lost 1 time");
  auto events = StatusEvents(running, once, false);
  EXPECT_EQ(Reasons(events), Strings{"QueueLost"});
  EXPECT_EQ(events[0].type, "Warning");
  EXPECT_EQ(events[0].note, "lost 1 time");
  EXPECT_EQ(Reasons(StatusEvents(once, once, false)), Strings{});
  EXPECT_EQ(Reasons(StatusEvents(EventRelevantStatus(once), once, false)),
            Strings{});
  events = StatusEvents(once, replaced("QueueRestored", "lost 2 times"), false);
  EXPECT_EQ(Reasons(events), Strings{"QueueRestored"});
  EXPECT_EQ(events[0].type, "Normal");
  // With a broker lost at the same write: both.
  json both = Degraded(replaced("QueueLost", "lost 1 time"), true, 3);
  EXPECT_EQ(Reasons(StatusEvents(Degraded(running, false, 4), both, false)),
            (Strings{"BrokerLost", "QueueLost"}));
}

TEST(StatusEvents, UnqueuedJobStarted) {
  EXPECT_EQ(Reasons(StatusEvents(Status("Queued", "Starting"),
                                 Status("Running", "JobRunning"), false)),
            Strings{"Started"});
}

// Without a CPU limit or request Flux schedules the node's hwloc view, not
// what was admitted: a Warning when it starts.
TEST(StatusEvents, NoResourceRequestWarnsWhenItStarts) {
  json running = Status("Running", "JobRunning");
  running["fluxResources"] = {{"source", "node"}};
  const auto events =
      StatusEvents(Status("Queued", "Starting"), running, false);
  EXPECT_EQ(Reasons(events), (Strings{"Started", "NoResourceRequest"}));
  EXPECT_EQ(events[1].type, "Warning");
  EXPECT_NE(events[1].note.find("spec.resources.limits.cpu"),
            std::string::npos);
  running["fluxResources"] = {{"source", "pod"}, {"cores", 1}, {"gpus", 0}};
  EXPECT_EQ(Reasons(StatusEvents(Status("Queued", "Starting"), running, false)),
            Strings{"Started"});
}

// Kueue deactivates a Workload whose max-exec-time ran out: it is evicted
// with reason Deactivated and not requeued, so "waits to be admitted
// again" would be wrong.
TEST(StatusEvents, DeactivatedWhenKueueDeactivatesARunningJob) {
  json deactivated = Status("Queued", "Deactivated");
  deactivated["workload"] = {
      {"reason", "Deactivated"},
      {"message",
       "The workload is deactivated due to exceeding the maximum execution "
       "time"}};
  const auto events =
      StatusEvents(Status("Running", "JobRunning"), deactivated, true);
  ASSERT_EQ(Reasons(events), Strings{"Deactivated"});
  EXPECT_EQ(events[0].type, "Warning");
  EXPECT_NE(events[0].note.find("not admitted again"), std::string::npos);
  EXPECT_NE(events[0].note.find("maximum execution time"), std::string::npos);
}

TEST(StatusEvents, PreemptedWhenKueueSuspendsARunningJob) {
  json preempted = Status("Queued", "Preempted");
  preempted["workload"] = {{"reason", "Preempted"},
                           {"message", "Preempted to accommodate urgent"}};
  const auto events =
      StatusEvents(Status("Running", "JobRunning"), preempted, true);
  ASSERT_EQ(Reasons(events), Strings{"Preempted"});
  EXPECT_NE(events[0].note.find("Preempted to accommodate urgent"),
            std::string::npos);
  // Unqueued: spec.suspend set by the user.
  EXPECT_EQ(Reasons(StatusEvents(Status("Running", "JobRunning"),
                                 Status("Queued", "Suspended"), false)),
            Strings{"Suspended"});
}

TEST(StatusEvents, CompletedOnceAndFailedAsAWarning) {
  const json met = Status("Succeeded", "SuccessCriteriaMet");
  EXPECT_EQ(Reasons(StatusEvents(Status("Running", "JobRunning"), met, true)),
            Strings{"Completed"});
  EXPECT_TRUE(StatusEvents(met, Status("Succeeded", "CompletionsReached"), true)
                  .empty());
  const auto failed =
      StatusEvents(Status("Running", "JobRunning"),
                   Status("Failed", "BackoffLimitExceeded", "1 failed"), false);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0], (EventSpec{"Warning", "Failed", "Reconcile",
                                  "BackoffLimitExceeded: 1 failed"}));
}

TEST(StatusEvents, NoteFitsTheApiLimitWithoutSplittingUtf8) {
  std::string long_message(kMaxEventNote - 1, 'x');
  long_message += "\xc3\xa9tail";  // a 2-byte character across the limit
  const auto events = StatusEvents(
      json(), Status("Failed", "InvalidSpec", long_message), false);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].note, std::string(kMaxEventNote - 1, 'x'));
}

TEST(EventRelevantStatus, GivesTheSameEventsAsTheWholeStatus) {
  const std::vector<json> statuses = {
      json::object(),
      Status("Pending", "CreatingJob"),
      Status("Pending", "JobNameTaken", "a Job named x exists"),
      Status("Queued", "WaitingForKueue"),
      Status("Running", "Admitted"),
      Status("Succeeded", "Complete"),
      Status("Failed", "InvalidSpec", "spec.size: must be > 0"),
      {{"state", "Queued"}},  // no conditions
  };
  for (const json& before : statuses) {
    const json kept = EventRelevantStatus(before);
    EXPECT_LE(kept.dump().size(), before.dump().size() + 2) << before;
    for (const json& after : statuses) {
      for (const bool queued : {false, true}) {
        EXPECT_EQ(StatusEvents(kept, after, queued),
                  StatusEvents(before, after, queued))
            << before << " -> " << after;
      }
    }
  }
}

TEST(EventObject, IsAnEventsV1EventAboutTheMiniCluster) {
  json mc = MiniClusterObject();
  mc["metadata"]["resourceVersion"] = "42";
  const json event = EventObject(
      mc, {"Warning", "JobNameTaken", "Create", "in the way"},
      std::string(200, 'h'), "2026-01-02T03:04:05.123456Z", "1881c0b2a4e5f000");
  EXPECT_EQ(event["apiVersion"], "events.k8s.io/v1");
  EXPECT_EQ(event["kind"], "Event");
  EXPECT_EQ(event["metadata"], (json{{"name", "demo.1881c0b2a4e5f000"},
                                     {"namespace", "science"}}));
  EXPECT_EQ(event["eventTime"], "2026-01-02T03:04:05.123456Z");
  EXPECT_EQ(event["reportingController"],
            "minicluster.dev/minicluster-controller");
  EXPECT_EQ(event["reportingInstance"], std::string(128, 'h'));
  EXPECT_EQ(event["type"], "Warning");
  EXPECT_EQ(event["reason"], "JobNameTaken");
  EXPECT_EQ(event["action"], "Create");
  EXPECT_EQ(event["note"], "in the way");
  EXPECT_EQ(event["regarding"],
            (json{{"apiVersion", "minicluster.dev/v1alpha1"},
                  {"kind", "MiniCluster"},
                  {"name", "demo"},
                  {"namespace", "science"},
                  {"uid", "1b4e28ba-2fa1-11d2-883f-0016d3cca427"},
                  {"resourceVersion", "42"}}));
}

// The reconciler's side: events after status writes only, once per change.
class FakeRecorder : public EventRecorder {
 public:
  void Record(const json& regarding, const EventSpec& event) override {
    names.push_back(kube::ObjectKey(regarding));
    reasons.push_back(event.reason);
  }
  Strings names, reasons;
};

class StatusOnlyApi : public kube::KubeApi {
 public:
  kube::HttpResponse Create(const std::string& path, const json&,
                            const std::string&) override {
    if (path.ends_with("/jobs")) return {409, "{}", ""};
    return {201, "{}", ""};
  }
  kube::HttpResponse Apply(const std::string&, const json&, const std::string&,
                           bool) override {
    return {apply_status, "{}", ""};
  }
  // The MiniCluster from the fixture's cache; the Job in the way: not the
  // MiniCluster's.
  kube::HttpResponse Get(const std::string& path) override {
    if (auto got = testing::MiniClusterGet(*miniclusters, path)) return *got;
    return {200, R"({"metadata": {"name": "demo", "uid": "theirs"}})", ""};
  }
  kube::HttpResponse Delete(const std::string&, const json&) override {
    return {200, "{}", ""};
  }
  long apply_status = 200;
  const kube::ObjectStore* miniclusters = nullptr;
};

struct Fixture {
  kube::ObjectStore miniclusters, services, network_policies, jobs, pods;
  kube::ObjectStore workloads{JobUidsOfWorkload};
  StatusOnlyApi api;
  FakeRecorder recorder;
  Reconciler reconciler{
      {miniclusters, services, jobs, workloads, network_policies, pods},
      api,
      DesiredOptions{},
      &recorder};
  Fixture() { api.miniclusters = &miniclusters; }
};

TEST(ReconcilerEvents, OneEventPerRefusalThoughTheCacheLagsAndItRetries) {
  Fixture f;
  f.miniclusters.Upsert(MiniClusterObject());
  for (int i = 0; i < 3; ++i) {
    // The cache never shows the status written: each retry writes it again.
    EXPECT_EQ(f.reconciler.Reconcile("science/demo").reason,
              RetryReason::kJobNameTaken);
  }
  EXPECT_EQ(f.recorder.reasons, Strings{"JobNameTaken"});
  EXPECT_EQ(f.recorder.names, Strings{"science/demo"});
}

TEST(ReconcilerEvents, NoEventWhenTheStatusWriteFails) {
  Fixture f;
  f.api.apply_status = 500;
  f.miniclusters.Upsert(MiniClusterObject());
  EXPECT_TRUE(f.reconciler.Reconcile("science/demo").retry());
  EXPECT_TRUE(f.recorder.reasons.empty());
  f.api.apply_status = 200;
  f.reconciler.Reconcile("science/demo");
  EXPECT_EQ(f.recorder.reasons, Strings{"JobNameTaken"});
}

TEST(ReconcilerEvents, ARecreatedMiniClusterIsNewAgain) {
  Fixture f;
  f.miniclusters.Upsert(MiniClusterObject());
  f.reconciler.Reconcile("science/demo");
  json again = MiniClusterObject();
  again["metadata"]["uid"] = "another-uid";
  f.miniclusters.Upsert(again);
  f.reconciler.Reconcile("science/demo");
  EXPECT_EQ(f.recorder.reasons, (Strings{"JobNameTaken", "JobNameTaken"}));
}

// Records the Events it is asked to create. While `hold` is set a create
// waits for Release(), so a test can keep the sender busy.
class EventSinkApi : public kube::KubeApi {
 public:
  kube::HttpResponse Create(const std::string& path, const json& object,
                            const std::string&) override {
    std::unique_lock lock(mu);
    ++entered;
    changed.notify_all();
    changed.wait(lock, [this] { return !hold; });
    paths.push_back(path);
    events.push_back(object);
    return {201, "{}", ""};
  }
  kube::HttpResponse Apply(const std::string&, const json&, const std::string&,
                           bool) override {
    return {500, "", ""};
  }
  kube::HttpResponse Get(const std::string&) override { return {404, "", ""}; }
  kube::HttpResponse Delete(const std::string&, const json&) override {
    return {404, "", ""};
  }
  void WaitEntered(int n) {
    std::unique_lock lock(mu);
    changed.wait(lock, [&] { return entered >= n; });
  }
  void Release() {
    {
      std::lock_guard lock(mu);
      hold = false;
    }
    changed.notify_all();
  }

  std::mutex mu;
  std::condition_variable changed;
  bool hold = false;
  int entered = 0;
  Strings paths;
  std::vector<json> events;
};

TEST(AsyncEventRecorder, SendsWhatIsPendingBeforeItIsDestroyed) {
  EventSinkApi api;
  KubeEventRecorder sender(api, "controller-0");
  json mc = MiniClusterObject();
  mc["metadata"]["resourceVersion"] = "7";
  mc["metadata"]["annotations"] = {{"big", std::string(4096, 'x')}};
  {
    AsyncEventRecorder events(sender);
    events.Record(mc, {"Normal", "Queued", "Reconcile", "one"});
    events.Record(mc, {"Normal", "Admitted", "Reconcile", "two"});
  }
  ASSERT_EQ(api.events.size(), 2u);
  EXPECT_EQ(api.paths[0], "/apis/events.k8s.io/v1/namespaces/science/events");
  EXPECT_EQ(api.events[0]["reason"], "Queued");
  EXPECT_EQ(api.events[1]["reason"], "Admitted");
  EXPECT_EQ(api.events[1]["regarding"]["resourceVersion"], "7");
  EXPECT_EQ(api.events[1]["regarding"]["uid"],
            "1b4e28ba-2fa1-11d2-883f-0016d3cca427");
}

TEST(AsyncEventRecorder, DropsWhatDoesNotFitWhileItIsBusy) {
  EventSinkApi api;
  api.hold = true;
  KubeEventRecorder sender(api, "controller-0");
  const json mc = MiniClusterObject();
  {
    AsyncEventRecorder events(sender, /*max_pending=*/1);
    events.Record(mc, {"Normal", "Queued", "Reconcile", "one"});
    api.WaitEntered(1);  // "one" is being sent, the queue is empty
    events.Record(mc, {"Normal", "Admitted", "Reconcile", "two"});
    events.Record(mc, {"Normal", "Completed", "Reconcile", "full"});
    api.Release();
  }
  ASSERT_EQ(api.events.size(), 2u);
  EXPECT_EQ(api.events[0]["reason"], "Queued");
  EXPECT_EQ(api.events[1]["reason"], "Admitted");
}

}  // namespace
}  // namespace fcc::controller
