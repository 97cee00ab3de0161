#include "controller/reconciler.h"

#include <gtest/gtest.h>

#include "controller/brokers.h"
#include "controller/copied_job.h"
#include "controller/events.h"
#include "controller/status.h"
#include "kube/time_format.h"
#include "test_objects.h"

namespace fcc::controller {
namespace {

using nlohmann::json;
using testing::MiniClusterObject;
using testing::MiniClusterWithPodFields;

constexpr char kNow[] = "2026-01-02T03:04:05Z";
const DesiredOptions kOptions;

// The Job as the API server would return it after our create.
json StoredJob(const json& mc_object, bool suspend) {
  MiniCluster mc = *ParseMiniCluster(mc_object).minicluster;
  json job = DesiredJob(mc, kOptions);
  job["metadata"]["uid"] = "job-uid";
  job["spec"]["suspend"] = suspend;
  return job;
}

json StoredService(const json& mc_object) {
  json svc = DesiredService(*ParseMiniCluster(mc_object).minicluster, kOptions);
  svc["spec"]["clusterIPs"] = json::array({"None"});  // server defaults
  svc["spec"]["type"] = "ClusterIP";
  return svc;
}

json StoredNetworkPolicy(const json& mc_object) {
  return DesiredNetworkPolicy(*ParseMiniCluster(mc_object).minicluster);
}

std::vector<Action::Kind> Kinds(const std::vector<Action>& actions) {
  std::vector<Action::Kind> kinds;
  for (const auto& a : actions) kinds.push_back(a.kind);
  return kinds;
}

using K = Action::Kind;

TEST(PlanReconcile, NewMiniClusterGetsServiceSuspendedJobAndStatus) {
  const json mc = MiniClusterObject();
  const auto actions = PlanReconcile({&mc}, kOptions, kNow);
  ASSERT_EQ(Kinds(actions),
            (std::vector<K>{K::kCreateService, K::kCreateNetworkPolicy,
                            K::kCreateJob, K::kApplyStatus}));
  // Created, never applied: an apply would take over another's Service.
  EXPECT_EQ(actions[0].path, "/api/v1/namespaces/science/services");
  EXPECT_EQ(actions[0].field_manager, kCreateFieldManager);
  EXPECT_FALSE(actions[0].force);
  EXPECT_EQ(actions[1].path,
            "/apis/networking.k8s.io/v1/namespaces/science/networkpolicies");
  EXPECT_EQ(actions[1].field_manager, kCreateFieldManager);
  EXPECT_FALSE(actions[1].force);
  EXPECT_EQ(actions[2].path, "/apis/batch/v1/namespaces/science/jobs");
  EXPECT_EQ(actions[2].field_manager, kCreateFieldManager);
  EXPECT_EQ(actions[2].body["spec"]["suspend"], true);
  EXPECT_EQ(actions[3].path,
            "/apis/minicluster.dev/v1alpha1/namespaces/science/miniclusters/"
            "demo/status");
  EXPECT_EQ(actions[3].body["status"]["state"], "Pending");
}

// The Job cache holds trimmed Jobs (no pod template, no managedFields):
// The status reads the key id from the cached (trimmed) Job.
TEST(TrimJobForCache, KeepsOnlyWhatTheStatusAndTheWorkerRoleRead) {
  const json mc = MiniClusterObject();
  DesiredOptions opts = kOptions;
  opts.key_id = "k2";
  json job = DesiredJob(*ParseMiniCluster(mc).minicluster, opts);
  TrimJobForCache(job);
  EXPECT_EQ(KeyIdOfJob(job), "k2");
  EXPECT_LT(job["spec"]["template"].dump().size(), 300u) << job.dump();
  json plain = StoredJob(mc, true);
  TrimJobForCache(plain);
  EXPECT_EQ(KeyIdOfJob(plain), "");
  EXPECT_LT(plain["spec"]["template"].dump().size(), 300u) << plain.dump();
  const json status =
      ComputeStatus(*ParseMiniCluster(mc).minicluster, &job, nullptr, kNow);
  EXPECT_EQ(status["keyId"], "k2");
  EXPECT_FALSE(
      ComputeStatus(*ParseMiniCluster(mc).minicluster, &plain, nullptr, kNow)
          .contains("keyId"));
}

// the plan must be the one the full Job gives.
TEST(PlanReconcile, TrimmedJobPlansLikeTheFullJob) {
  json mc = MiniClusterObject();
  const json svc = StoredService(mc);
  const json np = StoredNetworkPolicy(mc);
  for (bool queued : {false, true}) {
    if (queued) mc["metadata"]["labels"] = {{kQueueNameLabel, "user-queue"}};
    json full = StoredJob(mc, true);
    full["metadata"]["managedFields"] = json::array({{{"manager", "x"}}});
    json trimmed = full;
    TrimJobForCache(trimmed);
    EXPECT_LT(trimmed["spec"]["template"].dump().size(), 300u);
    EXPECT_FALSE(trimmed["metadata"].contains("managedFields"));
    EXPECT_TRUE(trimmed["spec"].contains("suspend"));
    const auto want =
        PlanReconcile({&mc, &svc, &full, nullptr, &np}, kOptions, kNow);
    const auto got =
        PlanReconcile({&mc, &svc, &trimmed, nullptr, &np}, kOptions, kNow);
    ASSERT_EQ(Kinds(got), Kinds(want)) << "queued " << queued;
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i].body, want[i].body);
  }
}

// A MiniCluster with every free-form field large and set, as the cache
// would see it whole.
json LargeMiniCluster() {
  json mc = MiniClusterWithPodFields();
  mc["metadata"]["labels"] = {{"team", "physics"},
                              {kPriorityClassLabel, "high"}};
  mc["metadata"]["annotations"] = {
      {"kubectl.kubernetes.io/last-applied-configuration", mc.dump()}};
  for (int i = 0; i < 200; ++i) {
    mc["spec"]["env"].push_back(
        {{"name", "V" + std::to_string(i)}, {"value", std::string(512, 'x')}});
  }
  return mc;
}

// The MiniCluster cache keeps a trimmed copy (TrimMiniClusterForCache):
// whenever the Job exists, the plan must be the one the whole object gives.
TEST(PlanReconcile, TrimmedMiniClusterPlansLikeTheWholeOneOnceItHasAJob) {
  for (bool queued : {false, true}) {
    json mc = LargeMiniCluster();
    if (queued) mc["metadata"]["labels"][kQueueNameLabel] = "user-queue";
    for (bool suspend : {false, true}) {
      mc["spec"]["suspend"] = suspend;
      json trimmed_mc = mc;
      TrimMiniClusterForCache(trimmed_mc);
      const json svc = StoredService(mc);
      const json np = StoredNetworkPolicy(mc);
      json drifted_job = StoredJob(mc, !suspend);
      drifted_job["metadata"]["labels"].erase(kNameLabel);
      json finished = StoredJob(mc, false);
      finished["status"]["conditions"] =
          json::array({{{"type", "Complete"}, {"status", "True"}}});
      for (const json& job : {StoredJob(mc, true), drifted_job, finished}) {
        for (const json* service : {&svc, static_cast<const json*>(nullptr)}) {
          const auto want =
              PlanReconcile({&mc, service, &job, nullptr, &np}, kOptions, kNow);
          const auto got = PlanReconcile(
              {&trimmed_mc, service, &job, nullptr, &np}, kOptions, kNow);
          ASSERT_EQ(Kinds(got), Kinds(want));
          for (size_t i = 0; i < got.size(); ++i) {
            EXPECT_EQ(got[i].path, want[i].path);
            EXPECT_EQ(got[i].body, want[i].body);
          }
        }
      }
    }
  }
}

TEST(PlanReconcile, UnqueuedJobIsUnsuspendedByTheLauncherManagerOnly) {
  const json mc = MiniClusterObject();
  const json svc = StoredService(mc);
  const json np = StoredNetworkPolicy(mc);
  const json job = StoredJob(mc, true);
  const auto actions =
      PlanReconcile({&mc, &svc, &job, nullptr, &np}, kOptions, kNow);
  ASSERT_EQ(Kinds(actions),
            (std::vector<K>{K::kSetJobSuspend, K::kApplyStatus}));
  EXPECT_EQ(actions[0].field_manager, kLauncherFieldManager);
  EXPECT_EQ(actions[0].path, "/apis/batch/v1/namespaces/science/jobs/demo");
  // Only spec.suspend: nothing else in the body that this manager could own.
  EXPECT_EQ(actions[0].body["spec"], (json{{"suspend", false}}));
  EXPECT_FALSE(actions[0].body["metadata"].contains("labels"));
}

TEST(PlanReconcile, UnqueuedWithSpecSuspendStaysSuspended) {
  json mc = MiniClusterObject();
  mc["spec"]["suspend"] = true;
  const json svc = StoredService(mc);
  const json np = StoredNetworkPolicy(mc);
  const json job = StoredJob(mc, true);
  const auto actions =
      PlanReconcile({&mc, &svc, &job, nullptr, &np}, kOptions, kNow);
  EXPECT_EQ(Kinds(actions), (std::vector<K>{K::kApplyStatus}));
}

// Kueue owns a queued Job's suspend: the plan is the status write alone
// (exactly, so that an empty plan, from a MiniCluster that no longer
// parses, say, cannot pass), in whichever state the Job is.
TEST(PlanReconcile, QueuedJobIsNeverUnsuspendedOrResuspended) {
  json mc = MiniClusterObject();
  mc["metadata"]["labels"] = {{kQueueNameLabel, "user-queue"}};
  const json svc = StoredService(mc);
  const json np = StoredNetworkPolicy(mc);
  for (bool suspended : {true, false}) {
    const json job = StoredJob(mc, suspended);
    const auto actions =
        PlanReconcile({&mc, &svc, &job, nullptr, &np}, kOptions, kNow);
    ASSERT_EQ(Kinds(actions), (std::vector<K>{K::kApplyStatus}))
        << "suspended " << suspended;
    EXPECT_EQ(actions[0].body["status"]["state"],
              suspended ? "Queued" : "Running");
  }
  // Even with spec.suspend set (it is for unqueued MiniClusters only).
  mc["spec"]["suspend"] = true;
  const json running = StoredJob(mc, false);
  const auto actions =
      PlanReconcile({&mc, &svc, &running, nullptr, &np}, kOptions, kNow);
  ASSERT_EQ(Kinds(actions), (std::vector<K>{K::kApplyStatus}));
  EXPECT_EQ(actions[0].body["status"]["state"], "Running");
}

// The queue label on the Job is enough: its suspend stays Kueue's, and the
// Job's extra label is no drift to apply away.
TEST(PlanReconcile, JobWithQueueLabelCountsAsQueuedEvenIfMiniClusterLostIt) {
  json mc = MiniClusterObject();
  mc["metadata"]["labels"] = {{kQueueNameLabel, "user-queue"}};
  const json svc = StoredService(mc);
  const json np = StoredNetworkPolicy(mc);
  const json job = StoredJob(mc, true);
  mc["metadata"].erase("labels");
  const auto actions =
      PlanReconcile({&mc, &svc, &job, nullptr, &np}, kOptions, kNow);
  ASSERT_EQ(Kinds(actions), (std::vector<K>{K::kApplyStatus}));
  EXPECT_EQ(actions[0].body["status"]["state"], "Queued");
}

TEST(PlanReconcile, AppliesJobMetadataWithoutSpecWhenOwnerLabelsDrift) {
  const json mc = MiniClusterObject();
  const json svc = StoredService(mc);
  const json np = StoredNetworkPolicy(mc);
  json job = StoredJob(mc, false);
  job["metadata"]["labels"].erase("minicluster.dev/name");
  const auto actions =
      PlanReconcile({&mc, &svc, &job, nullptr, &np}, kOptions, kNow);
  ASSERT_FALSE(actions.empty());
  EXPECT_EQ(actions[0].kind, K::kApplyJob);
  EXPECT_EQ(actions[0].field_manager, kFieldManager);
  EXPECT_FALSE(actions[0].body.contains("spec"));
}

// What Kueue's admission does to a Job (sigs.k8s.io/kueue pkg/podset Merge,
// called from the batch/Job integration's RunWithPodSetsInfo): the
// flavor's nodeSelector and tolerations merged into the MiniCluster's, its
// labels, annotations and scheduling gates added, the Job unsuspended.
json AdmittedByKueue(json job) {
  json& pod = job["spec"]["template"];
  pod["spec"]["nodeSelector"]["cloud.example.com/flavor"] = "spot";
  pod["spec"]["tolerations"].push_back(
      {{"key", "spot"}, {"operator", "Exists"}, {"effect", "NoSchedule"}});
  pod["metadata"]["labels"]["kueue.x-k8s.io/tas"] = "true";
  pod["metadata"]["annotations"]["kueue.x-k8s.io/workload"] = "job-demo-1";
  pod["spec"]["schedulingGates"] =
      json::array({{{"name", "kueue.x-k8s.io/topology"}}});
  job["spec"]["suspend"] = false;
  return job;
}

// The MiniCluster's nodeSelector, tolerations, labels and annotations meet
// Kueue's in one pod template. The controller writes that template once,
// at creation: not after Kueue merged the flavor in, not after Kueue
// restored it on preemption, and not when the user edits the MiniCluster.
TEST(PlanReconcile, NeverRewritesThePodTemplateKueueMergesInto) {
  json mc = MiniClusterWithPodFields();
  mc["metadata"]["labels"] = {{kQueueNameLabel, "user-queue"}};
  const json svc = StoredService(mc);
  const json np = StoredNetworkPolicy(mc);
  const json created = StoredJob(mc, true);  // also Kueue's restored one
  const json admitted = AdmittedByKueue(created);
  json edited = mc;
  edited["metadata"]["generation"] = 4;
  edited["spec"]["nodeSelector"] = {{"disk", "nvme"}};
  edited["spec"]["tolerations"] = json::array();
  edited["spec"]["podLabels"]["team"] = "chemistry";
  for (const json& job : {created, admitted}) {
    json trimmed = job;
    TrimJobForCache(trimmed);
    const json& cached = trimmed;  // as the Job cache holds it
    for (const json* seen : {&job, &cached}) {
      for (const json* minicluster : {&mc, &edited}) {
        const auto actions = PlanReconcile(
            {minicluster, &svc, seen, nullptr, &np}, kOptions, kNow);
        EXPECT_EQ(Kinds(actions), (std::vector<K>{K::kApplyStatus}))
            << "suspend " << job["spec"]["suspend"] << ", trimmed "
            << (seen == &cached) << ", edited " << (minicluster == &edited);
      }
    }
  }
}

// Kueue may admit 2 of 4: once the Job runs, the lead's pod (and only a
// live one of index 0) is told the admitted count, the Job's parallelism;
// once told, nothing more. Suspended, or admitted whole, nothing.
TEST(PlanReconcile, TellsTheLeadPodHowManyBrokersKueueAdmitted) {
  json mc = MiniClusterObject();
  mc["metadata"]["labels"] = {{kQueueNameLabel, "user-queue"}};
  mc["spec"]["minSize"] = 2;
  const json svc = StoredService(mc);
  const json np = StoredNetworkPolicy(mc);
  json job = StoredJob(mc, false);
  job["spec"]["parallelism"] = 3;
  auto pod = [](const char* name, const char* index) {
    return json{
        {"metadata",
         {{"name", name},
          {"labels", {{"batch.kubernetes.io/job-completion-index", index}}}}},
        {"status", {{"phase", "Running"}}}};
  };
  std::vector<json> pods = {pod("demo-0-a", "0"), pod("demo-1-a", "1")};
  json gone = pod("demo-0-old", "0");
  gone["status"]["phase"] = "Failed";
  pods.push_back(gone);
  auto actions =
      PlanReconcile({&mc, &svc, &job, nullptr, &np, &pods}, kOptions, kNow);
  ASSERT_EQ(Kinds(actions),
            (std::vector<K>{K::kApplyLeadAdmitted, K::kApplyStatus}));
  EXPECT_EQ(actions[0].path, "/api/v1/namespaces/science/pods/demo-0-a");
  EXPECT_EQ(actions[0].body["metadata"]["annotations"],
            (json{{"minicluster.dev/admitted", "3"}}));
  EXPECT_EQ(actions[0].field_manager, "minicluster-controller");
  // The cache keeps no minSize: the Job says Kueue may admit fewer.
  json trimmed = mc;
  TrimMiniClusterForCache(trimmed);
  EXPECT_EQ(Kinds(PlanReconcile({&trimmed, &svc, &job, nullptr, &np, &pods},
                                kOptions, kNow)),
            (std::vector<K>{K::kApplyLeadAdmitted, K::kApplyStatus}));

  pods[0]["metadata"]["annotations"] = {{"minicluster.dev/admitted", "3"}};
  EXPECT_EQ(Kinds(PlanReconcile({&mc, &svc, &job, nullptr, &np, &pods},
                                kOptions, kNow)),
            (std::vector<K>{K::kApplyStatus}));
  const json suspended = StoredJob(mc, true);
  pods[0]["metadata"].erase("annotations");
  EXPECT_EQ(Kinds(PlanReconcile({&mc, &svc, &suspended, nullptr, &np, &pods},
                                kOptions, kNow)),
            (std::vector<K>{K::kApplyStatus}));
  mc["spec"].erase("minSize");
  const json whole = StoredJob(mc, false);
  EXPECT_EQ(Kinds(PlanReconcile({&mc, &svc, &whole, nullptr, &np, &pods},
                                kOptions, kNow)),
            (std::vector<K>{K::kApplyStatus}));
}

TEST(PlanReconcile, SteadyStateWritesNothing) {
  json mc = MiniClusterObject();
  const json svc = StoredService(mc);
  const json np = StoredNetworkPolicy(mc);
  const json job = StoredJob(mc, false);
  auto actions = PlanReconcile({&mc, &svc, &job, nullptr, &np}, kOptions, kNow);
  ASSERT_EQ(Kinds(actions), (std::vector<K>{K::kApplyStatus}));
  mc["status"] = actions[0].body["status"];
  EXPECT_TRUE(PlanReconcile({&mc, &svc, &job, nullptr, &np}, kOptions,
                            "2030-01-01T00:00:00Z")
                  .empty());
}

TEST(PlanReconcile, ForeignJobOfTheSameNameIsNotTouched) {
  const json mc = MiniClusterObject();
  const json svc = StoredService(mc);
  const json np = StoredNetworkPolicy(mc);
  json job = StoredJob(mc, true);
  job["metadata"]["ownerReferences"][0]["uid"] = "previous-minicluster";
  const auto actions =
      PlanReconcile({&mc, &svc, &job, nullptr, &np}, kOptions, kNow);
  ASSERT_EQ(Kinds(actions), (std::vector<K>{K::kApplyStatus}));
  EXPECT_EQ(actions[0].body["status"]["conditions"][0]["reason"],
            "JobNameTaken");
}

TEST(PlanReconcile, ADriftedNetworkPolicyIsAppliedAForeignOneIsNotTouched) {
  const json mc = MiniClusterObject();
  const json svc = StoredService(mc);
  const json job = StoredJob(mc, true);
  json drifted = StoredNetworkPolicy(mc);
  drifted["spec"]["ingress"] = json::array({json::object()});  // allow all
  auto actions =
      PlanReconcile({&mc, &svc, &job, nullptr, &drifted}, kOptions, kNow);
  ASSERT_EQ(Kinds(actions),
            (std::vector<K>{K::kApplyNetworkPolicy, K::kSetJobSuspend,
                            K::kApplyStatus}));
  EXPECT_EQ(actions[0].path,
            "/apis/networking.k8s.io/v1/namespaces/science/networkpolicies/"
            "demo");
  EXPECT_EQ(actions[0].field_manager, kFieldManager);
  EXPECT_TRUE(actions[0].force);
  EXPECT_EQ(actions[0].body, StoredNetworkPolicy(mc));
  json foreign = drifted;
  foreign["metadata"]["ownerReferences"][0]["uid"] = "someone-else";
  actions = PlanReconcile({&mc, &svc, &job, nullptr, &foreign}, kOptions, kNow);
  EXPECT_EQ(Kinds(actions),
            (std::vector<K>{K::kSetJobSuspend, K::kApplyStatus}));
}

TEST(PlanReconcile, InvalidSpecOnlyWritesStatus) {
  json mc = MiniClusterObject();
  mc["spec"]["size"] = 0;
  const auto actions = PlanReconcile({&mc}, kOptions, kNow);
  ASSERT_EQ(Kinds(actions), (std::vector<K>{K::kApplyStatus}));
  EXPECT_EQ(actions[0].body["status"]["state"], "Failed");
}

// A quantity too large for Flux stops nothing: the MiniCluster is Failed
// (InvalidSpec, the field named), with a Warning Event, and no Job is made.
TEST(PlanReconcile, AHugeQuantityIsAnInvalidSpecNamingTheField) {
  json mc = MiniClusterObject();
  mc["spec"]["resources"] = {{"limits", {{"cpu", "99999999999999999999"}}}};
  const auto actions = PlanReconcile({&mc}, kOptions, kNow);
  ASSERT_EQ(Kinds(actions), (std::vector<K>{K::kApplyStatus}));
  const json& status = actions[0].body["status"];
  EXPECT_EQ(status["state"], "Failed");
  const auto events = StatusEvents(json(), status, false);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].reason, "InvalidSpec");
  EXPECT_EQ(events[0].type, "Warning");
  EXPECT_EQ(events[0].note.rfind("spec.resources.limits.cpu: ", 0), 0u)
      << events[0].note;

  mc["spec"]["resources"] = {{"limits", {{"nvidia.com/gpu", "1e30"}}}};
  EXPECT_EQ(Kinds(PlanReconcile({&mc}, kOptions, kNow)),
            (std::vector<K>{K::kApplyStatus}));
}

TEST(PlanReconcile, DeletingMiniClusterIsLeftToTheGarbageCollector) {
  json mc = MiniClusterObject();
  mc["metadata"]["deletionTimestamp"] = kNow;
  EXPECT_TRUE(PlanReconcile({&mc}, kOptions, kNow).empty());
}

// Records calls; answers with a configurable status.
class RecordingApi : public kube::KubeApi {
 public:
  struct Call {
    std::string verb, path, field_manager;
    json body;
    bool force;
  };
  kube::HttpResponse Create(const std::string& path, const json& body,
                            const std::string& manager) override {
    calls.push_back({"create", path, manager, body, false});
    if (path.ends_with("/services")) return {service_create_status, "{}", ""};
    if (path.ends_with("/networkpolicies"))
      return {policy_create_status, "{}", ""};
    return {create_status, create_body, ""};
  }
  kube::HttpResponse Apply(const std::string& path, const json& body,
                           const std::string& manager, bool force) override {
    calls.push_back({"apply", path, manager, body, force});
    return {apply_status, "{}", ""};
  }
  kube::HttpResponse Get(const std::string& path) override {
    if (auto got = testing::MiniClusterGet(*miniclusters, path)) {
      minicluster_gets.push_back(path);
      if (minicluster_get_status != 200)
        return {minicluster_get_status, "", ""};
      return *got;
    }
    calls.push_back({"get", path, "", json(), false});
    if (path.find("/services/") != std::string::npos) {
      return {200, service_get_body, ""};
    }
    if (path.find("/networkpolicies/") != std::string::npos) {
      return {200, policy_get_body, ""};
    }
    return {get_status, get_body, ""};
  }
  kube::HttpResponse Delete(const std::string& path,
                            const json& options) override {
    calls.push_back({"delete", path, "", options, false});
    return {delete_status, "{}", ""};
  }
  long delete_status = 200;
  std::vector<Call> calls;
  // The API server's MiniClusters (the fixture's cache unless a test says).
  const kube::ObjectStore* miniclusters = nullptr;
  std::vector<std::string> minicluster_gets;
  long minicluster_get_status = 200;
  long get_status = 200;
  std::string get_body = "{}";
  long create_status = 201;
  std::string create_body = "{}";
  long apply_status = 200;
  long service_create_status = 201;
  std::string service_get_body = "{}";
  long policy_create_status = 201;
  std::string policy_get_body = "{}";
};

// The Events the reconciler records, with what each is about.
struct RecordingEvents : EventRecorder {
  void Record(const json& regarding, const EventSpec& event) override {
    recorded.push_back({regarding, event});
  }
  // Those about an object of `kind`.
  std::vector<EventSpec> About(const std::string& kind) const {
    std::vector<EventSpec> about;
    for (const auto& [regarding, event] : recorded) {
      if (EventReference(regarding).value("kind", "") == kind) {
        about.push_back(event);
      }
    }
    return about;
  }
  std::vector<std::pair<json, EventSpec>> recorded;
};

struct Fixture {
  kube::ObjectStore miniclusters, services, network_policies, jobs, pods;
  kube::ObjectStore workloads{
      JobUidsOfWorkload};  // as the controller's Watches
  RecordingApi api;
  RecordingEvents events;
  Reconciler reconciler;
  explicit Fixture(const DesiredOptions& options = kOptions)
      : reconciler(
            {miniclusters, services, jobs, workloads, network_policies, pods},
            api, options, &events) {
    api.miniclusters = &miniclusters;
  }
};

TEST(Reconciler, CreatesFromCachesThroughTheApi) {
  Fixture f;
  f.miniclusters.Upsert(MiniClusterObject());
  EXPECT_FALSE(f.reconciler.Reconcile("science/demo").retry());
  ASSERT_EQ(f.api.calls.size(), 4u);
  EXPECT_EQ(f.api.calls[1].verb, "create");
  EXPECT_EQ(f.api.calls[1].body["kind"], "NetworkPolicy");
  EXPECT_EQ(f.api.calls[2].verb, "create");
  EXPECT_EQ(f.api.calls[2].body["kind"], "Job");
}

// The status written after creating the Job comes from the created Job
// (queued: WaitingForKueue), not the plan's "CreatingJob" that the Job's
// watch event would make the next reconcile overwrite.
TEST(Reconciler, StatusAfterCreateIsComputedFromTheCreatedJob) {
  Fixture f;
  json mc = MiniClusterObject();
  mc["metadata"]["labels"] = {{kQueueNameLabel, "user-queue"}};
  f.miniclusters.Upsert(mc);
  f.api.create_body = StoredJob(mc, true).dump();
  EXPECT_FALSE(f.reconciler.Reconcile("science/demo").retry());
  ASSERT_EQ(f.api.calls.size(), 4u);  // service, policy, create, status
  const json status = f.api.calls[3].body["status"];
  EXPECT_EQ(status["state"], "Queued");
  EXPECT_EQ(status["conditions"][0]["reason"], "WaitingForKueue");

  // The next reconcile, with the Job and Service in the caches, writes
  // nothing.
  mc["status"] = status;
  f.miniclusters.Upsert(mc);
  f.services.Upsert(StoredService(mc));
  f.network_policies.Upsert(StoredNetworkPolicy(mc));
  f.jobs.Upsert(StoredJob(mc, true));
  f.api.calls.clear();
  EXPECT_FALSE(f.reconciler.Reconcile("science/demo").retry());
  EXPECT_TRUE(f.api.calls.empty());
}

TEST(Reconciler, AlreadyExistsOnCreateIsNotAnError) {
  Fixture f;
  f.miniclusters.Upsert(MiniClusterObject());
  f.api.create_status = 409;
  f.api.get_body = StoredJob(MiniClusterObject(), true).dump();
  EXPECT_FALSE(f.reconciler.Reconcile("science/demo").retry());
}

// A Job of that name without our label is invisible to the Job cache: the
// 409 is the only sign. Report it and retry until the name is free.
// Also when the MiniCluster already shows the status planned without a
// Job (an earlier create failed), so the plan holds no status write.
TEST(Reconciler, ForeignJobOnCreateIsReportedAndRetried) {
  for (bool status_shown : {false, true}) {
    Fixture f;
    json mc = MiniClusterObject();
    if (status_shown)
      mc["status"] = PlanReconcile({&mc}, kOptions, kNow).back().body["status"];
    f.miniclusters.Upsert(mc);
    f.api.create_status = 409;
    f.api.get_body =
        R"({"metadata": {"name": "demo", "namespace": "science", "uid": "x"}})";
    EXPECT_EQ(f.reconciler.Reconcile("science/demo").reason,
              RetryReason::kJobNameTaken);
    ASSERT_EQ(f.api.calls.size(), 5u);  // service, policy, create, get, status
    EXPECT_EQ(f.api.calls[3].verb, "get");
    EXPECT_EQ(f.api.calls[3].path,
              "/apis/batch/v1/namespaces/science/jobs/demo");
    EXPECT_EQ(f.api.calls[4].body["status"]["conditions"][0]["reason"],
              "JobNameTaken");
  }
}

// The Job exists and is ours (created by an earlier reconcile whose watch
// event has not arrived yet): the status comes from that Job.
TEST(Reconciler, OwnJobOnCreateGivesTheStatusOfThatJob) {
  Fixture f;
  f.miniclusters.Upsert(MiniClusterObject());
  f.api.create_status = 409;
  f.api.get_body = StoredJob(MiniClusterObject(), true).dump();
  EXPECT_FALSE(f.reconciler.Reconcile("science/demo").retry());
  ASSERT_EQ(f.api.calls.size(), 5u);  // service, policy, create, get, status
  EXPECT_EQ(f.api.calls[4].body["status"]["state"], "Queued");
}

// A Service of that name without our label is invisible to the Service
// cache: the create's 409 shows it. It is never applied over (that would
// replace its selector and add an owner); no Job is made; the status says
// why, and the key is retried until the name is free.
TEST(Reconciler, ForeignServiceOnCreateIsLeftAloneReportedAndRetried) {
  Fixture f;
  f.miniclusters.Upsert(MiniClusterObject());
  f.api.service_create_status = 409;
  f.api.service_get_body =
      R"({"metadata": {"name": "demo", "namespace": "science", "uid": "x"}})";
  EXPECT_EQ(f.reconciler.Reconcile("science/demo").reason,
            RetryReason::kServiceNameTaken);
  ASSERT_EQ(f.api.calls.size(), 3u);  // create service, get, status
  EXPECT_EQ(f.api.calls[1].path, "/api/v1/namespaces/science/services/demo");
  EXPECT_EQ(f.api.calls[2].verb, "apply");
  EXPECT_EQ(f.api.calls[2].body["status"]["conditions"][0]["reason"],
            "ServiceNameTaken");
}

// Ours, created before its watch event came: the reconcile goes on.
TEST(Reconciler, OwnServiceOnCreateIsNotAnError) {
  Fixture f;
  f.miniclusters.Upsert(MiniClusterObject());
  f.api.service_create_status = 409;
  f.api.service_get_body = StoredService(MiniClusterObject()).dump();
  EXPECT_FALSE(f.reconciler.Reconcile("science/demo").retry());
  // create service, get, create policy, create Job, status
  ASSERT_EQ(f.api.calls.size(), 5u);
  EXPECT_EQ(f.api.calls[3].body["kind"], "Job");
}

// A NetworkPolicy of that name that is not the MiniCluster's is left as it
// is, and nothing waits for it: the Job is made, no retry.
TEST(Reconciler, ForeignNetworkPolicyOnCreateIsLeftAloneAndTheJobIsMade) {
  Fixture f;
  f.miniclusters.Upsert(MiniClusterObject());
  f.api.policy_create_status = 409;
  f.api.policy_get_body =
      R"({"metadata": {"name": "demo", "namespace": "science", "uid": "x"}})";
  EXPECT_FALSE(f.reconciler.Reconcile("science/demo").retry());
  // create service, create policy, get policy, create Job, status
  ASSERT_EQ(f.api.calls.size(), 5u);
  EXPECT_EQ(
      f.api.calls[2].path,
      "/apis/networking.k8s.io/v1/namespaces/science/networkpolicies/demo");
  EXPECT_EQ(f.api.calls[3].body["kind"], "Job");
  for (const auto& call : f.api.calls) {
    EXPECT_FALSE(call.verb == "apply" &&
                 call.path.find("networkpolicies") != std::string::npos)
        << "applied over another's NetworkPolicy";
  }
}

// A Service of that name in the cache that the MiniCluster does not control
// (the previous MiniCluster of that name, being garbage-collected): no write
// to it, no Job, and the status says why.
TEST(PlanReconcile, ServiceInTheWayIsNotAppliedOver) {
  const json mc = MiniClusterObject();
  json other = StoredService(mc);
  other["metadata"]["ownerReferences"][0]["uid"] = "previous-uid";
  const auto actions = PlanReconcile({&mc, &other}, kOptions, kNow);
  ASSERT_EQ(Kinds(actions), (std::vector<K>{K::kApplyStatus}));
  EXPECT_EQ(actions[0].body["status"]["conditions"][0]["reason"],
            "ServiceNameTaken");
}

// Without the Job the status cannot be told: nothing more is written.
TEST(Reconciler, UnreadableJobAfterConflictIsRetriedWithoutStatus) {
  Fixture f;
  f.miniclusters.Upsert(MiniClusterObject());
  f.api.create_status = 409;
  f.api.get_status = 500;
  EXPECT_EQ(f.reconciler.Reconcile("science/demo").reason,
            RetryReason::kJobLookupFailed);
  ASSERT_EQ(f.api.calls.size(), 4u);  // service, policy, create, get
}

TEST(Reconciler, FailedApplyAsksForRetry) {
  Fixture f;
  f.miniclusters.Upsert(MiniClusterObject());
  f.api.apply_status = 500;
  EXPECT_EQ(f.reconciler.Reconcile("science/demo").reason,
            RetryReason::kWriteFailed);
}

// A MiniCluster whose Job completed, with `ttl` (if any), reconciled
// once: it turns Succeeded now.
struct Finished : Fixture {
  ReconcileResult result;
  explicit Finished(std::optional<int> ttl, long delete_status = 200) {
    json mc = MiniClusterObject();
    if (ttl) mc["spec"]["ttlSecondsAfterFinished"] = *ttl;
    miniclusters.Upsert(mc);
    services.Upsert(StoredService(mc));
    network_policies.Upsert(StoredNetworkPolicy(mc));
    json job = StoredJob(mc, false);
    job["status"] = {{"succeeded", 1},
                     {"conditions",
                      {{{"type", "SuccessCriteriaMet"}, {"status", "True"}},
                       {{"type", "Complete"}, {"status", "True"}}}}};
    jobs.Upsert(job);
    api.delete_status = delete_status;
    result = reconciler.Reconcile("science/demo");
  }
  std::vector<std::string> Verbs() const {
    std::vector<std::string> verbs;
    for (const auto& c : api.calls) verbs.push_back(c.verb);
    return verbs;
  }
};

TEST(Reconciler, AFinishedMiniClusterWhoseTtlRanOutIsDeletedByUid) {
  Finished f(0);
  EXPECT_FALSE(f.result.retry());
  ASSERT_EQ(f.Verbs(), (std::vector<std::string>{"apply", "delete"}));
  EXPECT_EQ(f.api.calls[0].body["status"]["state"], "Succeeded");
  EXPECT_EQ(f.api.calls[1].path,
            "/apis/minicluster.dev/v1alpha1/namespaces/science/miniclusters/"
            "demo");
  EXPECT_EQ(f.api.calls[1].body["preconditions"]["uid"],
            "1b4e28ba-2fa1-11d2-883f-0016d3cca427");
  EXPECT_EQ(f.api.calls[1].body["propagationPolicy"], "Background");
}

TEST(Reconciler, AFinishedMiniClusterIsLookedAtAgainWhenItsTtlRunsOut) {
  Finished f(3600);
  EXPECT_FALSE(f.result.retry());
  EXPECT_EQ(f.Verbs(), std::vector<std::string>{"apply"});
  ASSERT_TRUE(f.result.after.has_value());
  EXPECT_GT(*f.result.after, std::chrono::seconds(3590));
  EXPECT_LE(*f.result.after, std::chrono::seconds(3600));
}

TEST(Reconciler, WithoutATtlAFinishedMiniClusterStays) {
  Finished f(std::nullopt);
  EXPECT_EQ(f.Verbs(), std::vector<std::string>{"apply"});
  EXPECT_FALSE(f.result.after.has_value());
}

// A refused spec is Failed too: its TTL runs as any finished one's.
TEST(Reconciler, AnInvalidSpecWhoseTtlRanOutIsDeleted) {
  Fixture f;
  json mc = MiniClusterObject();
  mc["spec"]["size"] = "four";
  mc["spec"]["ttlSecondsAfterFinished"] = 0;
  f.miniclusters.Upsert(mc);
  EXPECT_FALSE(f.reconciler.Reconcile("science/demo").retry());
  std::vector<std::string> verbs;
  for (const auto& c : f.api.calls) verbs.push_back(c.verb);
  ASSERT_EQ(verbs, (std::vector<std::string>{"apply", "delete"}));
  EXPECT_EQ(f.api.calls[0].body["status"]["state"], "Failed");
}

TEST(Reconciler, AFailedDeleteIsRetriedAGoneOrReplacedOneIsNot) {
  EXPECT_EQ(Finished(0, 500).result.reason, RetryReason::kWriteFailed);
  EXPECT_FALSE(Finished(0, 404).result.retry());
  EXPECT_FALSE(Finished(0, 409).result.retry()) << "uid precondition failed";
}

TEST(TtlLeft, CountsFromTheFinishedConditionOnly) {
  json object = MiniClusterObject();
  object["spec"]["ttlSecondsAfterFinished"] = 60;
  const MiniCluster mc = *ParseMiniCluster(object).minicluster;
  const auto at = [](const char* time) { return *kube::ParseTime(time); };
  const auto with = [&](const char* state, const char* condition_status) {
    json o = object;
    o["status"] = {{"state", state},
                   {"conditions",
                    {{{"type", state},
                      {"status", condition_status},
                      {"lastTransitionTime", "2026-01-02T03:04:05Z"}}}}};
    return o;
  };
  const auto now = at("2026-01-02T03:04:15Z");
  EXPECT_EQ(TtlLeft(mc, with("Succeeded", "True"), now),
            std::chrono::seconds(50));
  EXPECT_EQ(TtlLeft(mc, with("Failed", "True"), at("2026-01-02T03:05:05Z")),
            std::chrono::seconds(0));
  EXPECT_EQ(TtlLeft(mc, with("Running", "True"), now), std::nullopt);
  EXPECT_EQ(TtlLeft(mc, with("Succeeded", "False"), now), std::nullopt);
  EXPECT_EQ(TtlLeft(mc, MiniClusterObject(), now), std::nullopt);
  const MiniCluster no_ttl = *ParseMiniCluster(MiniClusterObject()).minicluster;
  EXPECT_EQ(TtlLeft(no_ttl, with("Succeeded", "True"), now), std::nullopt);
}

// A queued MiniCluster with its Service and Job in the caches and
// `workload` in the Workload cache: the status its reconcile writes.
json StatusWithWorkload(const json& workload) {
  Fixture f;
  json mc = MiniClusterObject();
  mc["metadata"]["labels"] = {{kQueueNameLabel, "user-queue"}};
  f.miniclusters.Upsert(mc);
  f.services.Upsert(StoredService(mc));
  f.network_policies.Upsert(StoredNetworkPolicy(mc));
  f.jobs.Upsert(StoredJob(mc, true));
  f.workloads.Upsert(workload);
  EXPECT_FALSE(f.reconciler.Reconcile("science/demo").retry());
  EXPECT_EQ(f.api.calls.size(), 1u);
  return f.api.calls.size() == 1 ? f.api.calls[0].body["status"] : json();
}

TEST(Reconciler, UsesTheWorkloadOwnedByTheJob) {
  const json status = StatusWithWorkload(
      json::parse(R"({"metadata": {"name": "job-demo-1", "namespace": "science",
      "ownerReferences": [{"kind": "Job", "name": "demo", "uid": "job-uid", "controller": true}]},
      "status": {"conditions": [{"type": "QuotaReserved", "status": "False",
        "reason": "Pending", "message": "insufficient unused quota for cpu"}]}})"));
  EXPECT_EQ(status["workload"]["name"], "job-demo-1");
  EXPECT_EQ(status["conditions"][0]["message"],
            "insufficient unused quota for cpu");
}

// The same rule as FindWorkloadForJob: Kueue's job-uid label is enough.
TEST(Reconciler, UsesTheWorkloadLabelledWithTheJobUid) {
  const json status = StatusWithWorkload(json::parse(
      R"({"metadata": {"name": "job-demo-2", "namespace": "science",
      "labels": {"kueue.x-k8s.io/job-uid": "job-uid"}}})"));
  EXPECT_EQ(status["workload"]["name"], "job-demo-2");
}

TEST(Reconciler, MissingMiniClusterIsDone) {
  Fixture f;
  EXPECT_FALSE(f.reconciler.Reconcile("science/gone").retry());
  EXPECT_TRUE(f.api.calls.empty());
}

// The cache holds the trimmed MiniCluster; the Job is created from the
// whole one, read from the API server.
TEST(Reconciler, CreatesTheJobFromTheWholeMiniClusterNotTheCachedCopy) {
  Fixture f;
  kube::ObjectStore server;
  const json whole = LargeMiniCluster();
  server.Upsert(whole);
  json cached = whole;
  TrimMiniClusterForCache(cached);
  f.miniclusters.Upsert(cached);
  f.api.miniclusters = &server;
  EXPECT_FALSE(f.reconciler.Reconcile("science/demo").retry());
  EXPECT_EQ(f.api.minicluster_gets,
            std::vector<std::string>{"/apis/minicluster.dev/v1alpha1/"
                                     "namespaces/science/miniclusters/demo"});
  ASSERT_GE(f.api.calls.size(), 3u);
  ASSERT_EQ(f.api.calls[2].body["kind"], "Job");
  EXPECT_EQ(f.api.calls[2].body,
            DesiredJob(*ParseMiniCluster(whole).minicluster, kOptions));
}

TEST(Reconciler, ReadsNoMiniClusterOnceItsJobIsCached) {
  Fixture f;
  const json mc = MiniClusterObject();
  f.miniclusters.Upsert(mc);
  f.services.Upsert(StoredService(mc));
  f.network_policies.Upsert(StoredNetworkPolicy(mc));
  f.jobs.Upsert(StoredJob(mc, false));
  EXPECT_FALSE(f.reconciler.Reconcile("science/demo").retry());
  EXPECT_TRUE(f.api.minicluster_gets.empty());
}

TEST(Reconciler, MiniClusterGoneFromTheApiServerIsDone) {
  Fixture f;
  const kube::ObjectStore server;  // deleted; the cache has not seen it yet
  f.miniclusters.Upsert(MiniClusterObject());
  f.api.miniclusters = &server;
  EXPECT_FALSE(f.reconciler.Reconcile("science/demo").retry());
  EXPECT_EQ(f.api.minicluster_gets.size(), 1u);
  EXPECT_TRUE(f.api.calls.empty());
}

TEST(Reconciler, UnreadableMiniClusterIsRetriedWithoutWrites) {
  Fixture f;
  f.miniclusters.Upsert(MiniClusterObject());
  f.api.minicluster_get_status = 503;
  EXPECT_EQ(f.reconciler.Reconcile("science/demo").reason,
            RetryReason::kMiniClusterLookupFailed);
  EXPECT_TRUE(f.api.calls.empty());
}

// The worker role: a Job MultiKueue copied here, and no MiniCluster.
TEST(Reconciler, WorkerMakesTheServiceAndPolicyOfACopiedJob) {
  DesiredOptions worker = kOptions;
  worker.multikueue_worker = true;
  Fixture f(worker);
  json job = testing::CopiedJob(MiniClusterObject());
  TrimJobForCache(job);
  f.jobs.Upsert(job);
  EXPECT_FALSE(f.reconciler.Reconcile("science/demo").retry());
  ASSERT_EQ(f.api.calls.size(), 2u);
  EXPECT_EQ(f.api.calls[0].verb, "create");
  EXPECT_EQ(f.api.calls[0].body["kind"], "Service");
  EXPECT_EQ(f.api.calls[1].body["kind"], "NetworkPolicy");
  for (const auto& call : f.api.calls) {
    EXPECT_EQ(call.body["metadata"]["ownerReferences"][0]["kind"], "Job");
    EXPECT_EQ(call.body["metadata"]["ownerReferences"][0]["uid"],
              "worker-job-uid");
  }
  // Once the caches have them, nothing more.
  f.api.calls.clear();
  const CopiedJobObjects made = *DesiredForCopiedJob(job, kOptions);
  f.services.Upsert(made.service);
  f.network_policies.Upsert(made.network_policy);
  EXPECT_FALSE(f.reconciler.Reconcile("science/demo").retry());
  EXPECT_TRUE(f.api.calls.empty());
}

// Without --multikueue-worker (a manager, a single cluster) a copied Job,
// or a user's Job made to look like one, gets nothing.
TEST(Reconciler, WithoutTheWorkerRoleACopiedJobGetsNothing) {
  Fixture f;
  json job = testing::CopiedJob(MiniClusterObject());
  TrimJobForCache(job);
  f.jobs.Upsert(job);
  EXPECT_FALSE(f.reconciler.Reconcile("science/demo").retry());
  EXPECT_TRUE(f.api.calls.empty());
}

// A MiniCluster of that name on the worker is reconciled as one: its own
// Service, never one owned by the Job.
TEST(Reconciler, WorkerReconcilesAMiniClusterOfThatNameAsAMiniCluster) {
  DesiredOptions worker = kOptions;
  worker.multikueue_worker = true;
  Fixture f(worker);
  f.miniclusters.Upsert(MiniClusterObject());
  json job = testing::CopiedJob(MiniClusterObject());
  TrimJobForCache(job);
  f.jobs.Upsert(job);
  f.reconciler.Reconcile("science/demo");
  ASSERT_FALSE(f.api.calls.empty());
  EXPECT_EQ(f.api.calls[0].body["kind"], "Service");
  EXPECT_EQ(f.api.calls[0].body["metadata"]["ownerReferences"][0]["kind"],
            "MiniCluster");
}

// Issue 42, item 7: on a worker, what stalls a copied Job's brokers is said
// on the Job, once, as a Warning Event (the manager's MiniCluster shows
// Running meanwhile), not left to a log line.
Fixture WorkerWithCopiedJob() {
  DesiredOptions worker = kOptions;
  worker.multikueue_worker = true;
  return Fixture(worker);
}

json CachedCopiedJob() {
  json job = testing::CopiedJob(MiniClusterObject());
  TrimJobForCache(job);
  return job;
}

// The Warning Events about the Job, each checked to name the fix.
std::vector<EventSpec> JobWarnings(const Fixture& f) {
  std::vector<EventSpec> warnings;
  for (const EventSpec& event : f.events.About("Job")) {
    EXPECT_EQ(event.type, "Warning");
    EXPECT_NE(event.note.find("delete or rename"), std::string::npos)
        << event.note;
    EXPECT_LE(event.note.size(), kMaxEventNote);
    warnings.push_back(event);
  }
  return warnings;
}

TEST(Reconciler, WorkerWarnsOnTheJobWhenAServiceOfItsNameIsAnothers) {
  Fixture f = WorkerWithCopiedJob();
  f.jobs.Upsert(CachedCopiedJob());
  // A tenant's Service of that name, unlabelled so not cached: the create
  // meets it.
  f.api.service_create_status = 409;
  f.api.service_get_body =
      R"({"metadata": {"name": "demo", "namespace": "science"}})";
  EXPECT_EQ(f.reconciler.Reconcile("science/demo").reason,
            RetryReason::kServiceNameTaken);
  auto warnings = JobWarnings(f);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].reason, "ServiceNameTaken");
  EXPECT_NE(warnings[0].note.find("Service science/demo"), std::string::npos)
      << warnings[0].note;
  EXPECT_NE(warnings[0].note.find("demo-0.demo"), std::string::npos);
  // Retried: no second Event for the same Job and cause.
  f.reconciler.Reconcile("science/demo");
  EXPECT_EQ(JobWarnings(f).size(), 1u);
}

TEST(Reconciler, WorkerWarnsOnTheJobWhenACachedServiceOfItsNameIsAnothers) {
  Fixture f = WorkerWithCopiedJob();
  const json job = CachedCopiedJob();
  f.jobs.Upsert(job);
  // Labelled as the controller's, so cached, but the Job does not own it.
  json service = DesiredForCopiedJob(job, kOptions)->service;
  service["metadata"]["ownerReferences"][0]["uid"] = "someone-else";
  f.services.Upsert(service);
  f.reconciler.Reconcile("science/demo");
  auto warnings = JobWarnings(f);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].reason, "ServiceNameTaken");
}

TEST(Reconciler, WorkerWarnsOnTheJobWhenAMiniClusterHasItsName) {
  Fixture f = WorkerWithCopiedJob();
  f.miniclusters.Upsert(MiniClusterObject());
  f.jobs.Upsert(CachedCopiedJob());
  f.reconciler.Reconcile("science/demo");
  auto warnings = JobWarnings(f);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].reason, "MiniClusterNameTaken");
  EXPECT_NE(warnings[0].note.find("MiniCluster science/demo"),
            std::string::npos)
      << warnings[0].note;
  f.reconciler.Reconcile("science/demo");
  EXPECT_EQ(JobWarnings(f).size(), 1u);
}

TEST(Reconciler, WorkerRecordsNothingForACopiedJobWithNothingInTheWay) {
  Fixture f = WorkerWithCopiedJob();
  f.jobs.Upsert(CachedCopiedJob());
  f.reconciler.Reconcile("science/demo");
  EXPECT_TRUE(f.events.recorded.empty());
}

TEST(PlanReconcile, TellsTheLeadPodEachRanksDomainOnceEveryBrokerHasANode) {
  json mc = MiniClusterObject();
  mc["spec"]["topology"] = {{"required", "example.com/rack"}};
  mc["spec"]["resources"] = {{"limits", {{"cpu", "2"}}}};
  const json svc = StoredService(mc);
  const json np = StoredNetworkPolicy(mc);
  const json job = StoredJob(mc, false);
  auto pod = [](int index, const char* node) {
    json p{{"metadata",
            {{"name", "demo-" + std::to_string(index) + "-a"},
             {"labels",
              {{"batch.kubernetes.io/job-completion-index",
                std::to_string(index)}}}}},
           {"status", {{"phase", "Running"}}}};
    if (*node) p["spec"]["nodeName"] = node;
    return p;
  };
  std::vector<json> pods = {pod(0, "n1"), pod(1, "n1"), pod(2, "n2"),
                            pod(3, "")};
  const std::map<std::string, std::string> domains = {
      {"n1", "rack-a"}, {"n2", "rack-b"}, {"n3", "rack-a"}};
  const auto plan = [&] {
    Observed o{&mc, &svc, &job, nullptr, &np, &pods, &domains};
    return PlanReconcile(o, kOptions, kNow);
  };
  // Index 3 has no node yet: nothing said.
  EXPECT_EQ(Kinds(plan()), (std::vector<K>{K::kApplyStatus}));
  // NodesToLookUp asks for the nodes only then.
  EXPECT_TRUE(NodesToLookUp(pods, 4).empty());
  pods[3]["spec"]["nodeName"] = "n3";
  EXPECT_EQ(NodesToLookUp(pods, 4),
            (std::vector<std::string>{"n1", "n2", "n3"}));
  auto actions = plan();
  ASSERT_EQ(Kinds(actions),
            (std::vector<K>{K::kApplyLeadTopology, K::kApplyStatus}));
  EXPECT_EQ(actions[0].path, "/api/v1/namespaces/science/pods/demo-0-a");
  EXPECT_EQ(actions[0].field_manager, "minicluster-controller-topology");
  EXPECT_EQ(actions[0].body["metadata"]["annotations"][kTopologyAnnotation],
            "[[resource.config]]\nhosts = \"demo-[0-1,3]\"\n"
            "properties = [\"rack-a\"]\n"
            "[[resource.config]]\nhosts = \"demo-[2]\"\n"
            "properties = [\"rack-b\"]\n");
  // The caches keep neither spec.topology nor the grant, and of the Job
  // only what it needs: the Job says, as the reconciler sees them.
  json trimmed = mc;
  TrimMiniClusterForCache(trimmed);
  json cached_job = job;
  TrimJobForCache(cached_job);
  EXPECT_EQ(TopologyLevelOfJob(cached_job), "example.com/rack");
  {
    Observed o{&trimmed, &svc, &cached_job, nullptr, &np, &pods, &domains};
    EXPECT_EQ(Kinds(PlanReconcile(o, kOptions, kNow)),
              (std::vector<K>{K::kApplyLeadTopology, K::kApplyStatus}));
  }
  // Said once: the lead reads it once, before its broker starts.
  pods[0]["metadata"]["annotations"] = {{kTopologyAnnotation, "x"}};
  EXPECT_EQ(Kinds(plan()), (std::vector<K>{K::kApplyStatus}));
  EXPECT_TRUE(NodesToLookUp(pods, 4).empty());
  // Nodes without the label: said so, and the lead goes on without.
  pods[0]["metadata"].erase("annotations");
  const std::map<std::string, std::string> unlabelled = {
      {"n1", ""}, {"n2", ""}, {"n3", ""}};
  Observed o{&mc, &svc, &job, nullptr, &np, &pods, &unlabelled};
  actions = PlanReconcile(o, kOptions, kNow);
  ASSERT_EQ(Kinds(actions),
            (std::vector<K>{K::kApplyLeadTopology, K::kApplyStatus}));
  EXPECT_EQ(actions[0].body["metadata"]["annotations"][kTopologyAnnotation],
            "# no broker's node has example.com/rack");
  // Without a CPU grant R is rank 0's node's, which takes no properties:
  // its Job mounts no topology.
  mc["spec"].erase("resources");
  const json ungranted = StoredJob(mc, false);
  EXPECT_EQ(TopologyLevelOfJob(ungranted), "");
  EXPECT_EQ(TopologyLevelOfJob(job), "example.com/rack");
  Observed without{&mc, &svc, &ungranted, nullptr, &np, &pods, &domains};
  EXPECT_EQ(Kinds(PlanReconcile(without, kOptions, kNow)),
            (std::vector<K>{K::kApplyStatus}));
}

}  // namespace
}  // namespace fcc::controller
