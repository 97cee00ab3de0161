#include "controller/status.h"

#include <gtest/gtest.h>

#include "common/file.h"
#include "controller/desired.h"
#include "kube/yaml_json.h"
#include "test_objects.h"

namespace fcc::controller {
namespace {

using nlohmann::json;
using testing::MiniClusterObject;

constexpr char kNow[] = "2026-01-02T03:04:05Z";

MiniCluster Mc(json labels = json::object(), bool suspend = false) {
  json object = MiniClusterObject();
  object["metadata"]["labels"] = labels;
  object["spec"]["suspend"] = suspend;
  return *ParseMiniCluster(object).minicluster;
}

json Job(bool suspend, json conditions = json::array()) {
  return json{{"metadata", {{"name", "demo"}, {"uid", "job-uid"}}},
              {"spec", {{"suspend", suspend}}},
              {"status",
               {{"active", suspend ? 0 : 4},
                {"ready", suspend ? 0 : 2},
                {"conditions", conditions}}}};
}

json Condition(const std::string& type, const std::string& status,
               const std::string& reason = "",
               const std::string& message = "") {
  return json{{"type", type},
              {"status", status},
              {"reason", reason},
              {"message", message}};
}

const json& Find(const json& status, const std::string& type) {
  for (const auto& c : status["conditions"]) {
    if (c["type"] == type) return c;
  }
  static const json none;
  return none;
}

// The four state conditions, one True; Degraded is apart (False here).
void ExpectOnlyTrue(const json& status, const std::string& type) {
  ASSERT_EQ(status["conditions"].size(), 5u);
  for (const auto& c : status["conditions"]) {
    const bool is_true = c["type"] == type;
    EXPECT_EQ(c["status"], is_true ? "True" : "False") << c.dump();
    EXPECT_EQ(c["observedGeneration"], 3);
    EXPECT_EQ(c["lastTransitionTime"], kNow);
  }
  EXPECT_EQ(status["state"], type);
}

TEST(Status, SuspendedUnqueuedWithSpecSuspendIsQueuedSuspended) {
  const json job = Job(true);
  const json status = ComputeStatus(Mc({}, true), &job, nullptr, kNow);
  ExpectOnlyTrue(status, "Queued");
  EXPECT_EQ(Find(status, "Queued")["reason"], "Suspended");
  EXPECT_EQ(status["jobName"], "demo");
  EXPECT_EQ(status["observedGeneration"], 3);
}

TEST(Status, QueuedWithoutWorkloadWaitsForKueue) {
  const json job = Job(true);
  const json status =
      ComputeStatus(Mc({{kQueueNameLabel, "user-queue"}}), &job, nullptr, kNow);
  ExpectOnlyTrue(status, "Queued");
  EXPECT_EQ(Find(status, "Queued")["reason"], "WaitingForKueue");
  EXPECT_NE(
      Find(status, "Queued")["message"].get<std::string>().find("user-queue"),
      std::string::npos);
  EXPECT_FALSE(status.contains("workload"));
}

TEST(Status, ShowsKueuePendingReasonFromWorkload) {
  const json job = Job(true);
  const json workload = {
      {"metadata", {{"name", "job-demo-abcde"}}},
      {"status",
       {{"conditions",
         json::array(
             {Condition("QuotaReserved", "False", "Pending",
                        "couldn't assign flavors to pod set main: insufficient "
                        "unused quota for cpu in flavor default-flavor, 4 more "
                        "needed")})}}}};
  const json status = ComputeStatus(Mc({{kQueueNameLabel, "user-queue"}}), &job,
                                    &workload, kNow);
  ExpectOnlyTrue(status, "Queued");
  EXPECT_EQ(Find(status, "Queued")["reason"], "Pending");
  EXPECT_NE(Find(status, "Queued")["message"].get<std::string>().find(
                "insufficient unused quota"),
            std::string::npos);
  EXPECT_EQ(status["workload"]["name"], "job-demo-abcde");
  EXPECT_EQ(status["workload"]["admitted"], false);
  EXPECT_EQ(status["workload"]["reason"], "Pending");
}

TEST(Status, AdmittedWorkloadAndRunningJob) {
  const json job = Job(false);
  const json workload = {
      {"metadata", {{"name", "job-demo-abcde"}}},
      {"status",
       {{"admission", {{"clusterQueue", "cluster-queue"}}},
        {"conditions",
         json::array({Condition("QuotaReserved", "True", "QuotaReserved"),
                      Condition("Admitted", "True", "Admitted",
                                "The workload is admitted")})}}}};
  const json status = ComputeStatus(Mc({{kQueueNameLabel, "user-queue"}}), &job,
                                    &workload, kNow);
  ExpectOnlyTrue(status, "Running");
  EXPECT_EQ(Find(status, "Running")["message"],
            "4 of 4 broker pods active, 2 ready");
  EXPECT_EQ(status["workload"]["admitted"], true);
  EXPECT_EQ(status["workload"]["clusterQueue"], "cluster-queue");
}

// MultiKueue: the manager's Workload names the worker that runs the Job
// (status.clusterName), and the manager's Job mirrors the worker's status.
TEST(Status, MultiKueueWorkloadNamesTheWorkerCluster) {
  const json job = Job(false);
  json workload = {
      {"metadata", {{"name", "job-demo-abcde"}}},
      {"status",
       {{"admission", {{"clusterQueue", "cluster-queue"}}},
        {"clusterName", "worker1"},
        {"conditions",
         json::array({Condition("QuotaReserved", "True", "QuotaReserved"),
                      Condition("Admitted", "True", "Admitted",
                                "The workload is admitted")})}}}};
  const MiniCluster mc = Mc({{kQueueNameLabel, "user-queue"}});
  const json status = ComputeStatus(mc, &job, &workload, kNow);
  ExpectOnlyTrue(status, "Running");
  EXPECT_EQ(Find(status, "Running")["message"],
            "4 of 4 broker pods active, 2 ready on worker cluster worker1");
  EXPECT_EQ(status["workload"]["clusterName"], "worker1");
  const json suspended = Job(true);
  EXPECT_EQ(
      Find(ComputeStatus(mc, &suspended, &workload, kNow), "Queued")["message"],
      "admitted by ClusterQueue cluster-queue on worker cluster "
      "worker1; waiting for the Job to start");
  json trimmed = workload;
  TrimWorkloadForCache(trimmed);
  EXPECT_EQ(ComputeStatus(mc, &job, &trimmed, kNow), status);
  // Before a worker admits it: quota reserved on the manager, MultiKueue's
  // check pending. The message says what it waits for.
  json waiting = {
      {"metadata", {{"name", "job-demo-abcde"}}},
      {"status",
       {{"admission", {{"clusterQueue", "cluster-queue"}}},
        {"admissionChecks", json::array({{{"name", "multikueue"},
                                          {"state", "Pending"},
                                          {"lastTransitionTime", kNow}}})},
        {"conditions",
         json::array(
             {Condition("QuotaReserved", "True", "QuotaReserved",
                        "Quota reserved in ClusterQueue cluster-queue")})}}}};
  TrimWorkloadForCache(waiting);
  const json queued = ComputeStatus(mc, &suspended, &waiting, kNow);
  EXPECT_EQ(Find(queued, "Queued")["reason"], "QuotaReserved");
  EXPECT_EQ(Find(queued, "Queued")["message"],
            "Quota reserved in ClusterQueue cluster-queue; waiting for "
            "admission check multikueue (Pending)");
  workload["status"].erase("clusterName");  // no MultiKueue
  EXPECT_FALSE(ComputeStatus(mc, &job, &workload, kNow)["workload"].contains(
      "clusterName"));
}

TEST(Status, EvictedWorkloadShowsWhyTheJobIsQueuedAgain) {
  const json job = Job(true);
  const json workload = {
      {"metadata", {{"name", "wl"}}},
      {"status",
       {{"conditions",
         json::array({Condition("QuotaReserved", "False", "Pending"),
                      Condition("Evicted", "True", "Preempted",
                                "Preempted to accommodate a "
                                "higher priority Workload")})}}}};
  const json status = ComputeStatus(Mc({{kQueueNameLabel, "user-queue"}}), &job,
                                    &workload, kNow);
  ExpectOnlyTrue(status, "Queued");
  EXPECT_EQ(Find(status, "Queued")["reason"], "Preempted");
}

// The Workload cache holds trimmed Workloads: the status must be the one the
// full Workload gives, and the pod sets (a copy of the Job's pod template)
// must be gone.
TEST(Status, TrimmedWorkloadGivesTheStatusOfTheFullOne) {
  const json job = Job(false);
  json full = {
      {"metadata",
       {{"name", "job-demo-abcde"},
        {"namespace", "science"},
        {"uid", "wl-uid"},
        {"labels", {{"kueue.x-k8s.io/job-uid", "job-uid"}}},
        {"ownerReferences",
         json::array(
             {{{"kind", "Job"}, {"name", "demo"}, {"uid", "job-uid"}}})},
        {"managedFields", json::array({{{"manager", "kueue"}}})}}},
      {"spec",
       {{"queueName", "user-queue"},
        {"podSets",
         json::array(
             {{{"name", "main"},
               {"count", 4},
               {"template", DesiredJob(Mc(), {})["spec"]["template"]}}})}}},
      {"status",
       {{"admission",
         {{"clusterQueue", "cluster-queue"},
          {"podSetAssignments", json::array({{{"name", "main"}}})}}},
        {"requeueState", {{"count", 1}}},
        {"conditions",
         json::array(
             {Condition("QuotaReserved", "True", "QuotaReserved"),
              Condition("Admitted", "True", "Admitted", "admitted")})}}}};
  json trimmed = full;
  TrimWorkloadForCache(trimmed);
  EXPECT_FALSE(trimmed.contains("spec"));
  EXPECT_FALSE(trimmed["metadata"].contains("managedFields"));
  EXPECT_EQ(trimmed["status"],
            (json{{"admission", {{"clusterQueue", "cluster-queue"}}},
                  {"conditions", full["status"]["conditions"]}}));
  EXPECT_EQ(JobUidsOfWorkload(trimmed), JobUidsOfWorkload(full));
  const MiniCluster mc = Mc({{kQueueNameLabel, "user-queue"}});
  EXPECT_EQ(ComputeStatus(mc, &job, &trimmed, kNow),
            ComputeStatus(mc, &job, &full, kNow));
  EXPECT_LT(trimmed.dump().size() * 4, full.dump().size());
}

TEST(Status, SuccessCriteriaMetOrCompleteIsSucceeded) {
  for (const char* type : {"SuccessCriteriaMet", "Complete"}) {
    const json job =
        Job(false, json::array({Condition(type, "True", "SuccessPolicy")}));
    const json status = ComputeStatus(Mc(), &job, nullptr, kNow);
    ExpectOnlyTrue(status, "Succeeded");
  }
}

TEST(Status, FailedJobIsFailedWithItsReason) {
  const json job = Job(
      false, json::array({Condition("Failed", "True", "BackoffLimitExceeded",
                                    "Job has reached the specified backoff "
                                    "limit")}));
  const json status = ComputeStatus(Mc(), &job, nullptr, kNow);
  ExpectOnlyTrue(status, "Failed");
  EXPECT_EQ(Find(status, "Failed")["reason"], "BackoffLimitExceeded");
}

json FailedPod(int index, int exit_code) {
  return json{
      {"metadata",
       {{"labels",
         {{"batch.kubernetes.io/job-completion-index",
           std::to_string(index)}}}}},
      {"status",
       {{"phase", "Failed"},
        {"containerStatuses",
         json::array(
             {{{"name", "flux-broker"},
               {"state", {{"terminated", {{"exitCode", exit_code}}}}}}})}}}};
}

// An index failed the Job (maxFailedIndexes 0): the pods say which and how.
TEST(Status, AFailedIndexIsSaidInTheMiniClustersWords) {
  const json job =
      Job(false,
          json::array({Condition("Failed", "True", "MaxFailedIndexesExceeded",
                                 "Job has exceeded the specified maximal "
                                 "number of failed indexes")}));
  auto reason = [&](const std::vector<json>& pods) {
    return Find(ComputeStatus(Mc(), &job, nullptr, kNow, &pods),
                "Failed")["reason"]
        .get<std::string>();
  };
  EXPECT_EQ(reason({FailedPod(1, 75), FailedPod(0, 76)}), "LeadBrokerLost");
  EXPECT_EQ(reason({FailedPod(1, 75), FailedPod(0, 3)}), "CommandFailed");
  EXPECT_EQ(reason({FailedPod(2, 75), FailedPod(2, 137), FailedPod(2, 75),
                    FailedPod(2, 75)}),
            "BrokerRestartsExhausted");
  EXPECT_EQ(reason({FailedPod(2, 75)}), "MaxFailedIndexesExceeded")
      << "neither the pods nor the Job say: the Job's reason";
  EXPECT_EQ(reason({}), "MaxFailedIndexesExceeded") << "no failed index";
  json lead_gone = job;
  lead_gone["status"]["failedIndexes"] = "0";
  const std::vector<json> none;
  EXPECT_EQ(Find(ComputeStatus(Mc(), &lead_gone, nullptr, kNow, &none),
                 "Failed")["reason"],
            "LeadBrokerLost")
      << "a deleted lead's pod is gone: the Job's failed indexes say which";
  lead_gone["status"]["failedIndexes"] = "2-3";
  EXPECT_EQ(Find(ComputeStatus(Mc(), &lead_gone, nullptr, kNow, &none),
                 "Failed")["reason"],
            "BrokerRestartsExhausted");
  const std::vector<json> pods = {FailedPod(0, 3)};
  EXPECT_EQ(Find(ComputeStatus(Mc(), &job, nullptr, kNow, &pods),
                 "Failed")["message"],
            "the lead broker's command exited 3 (kubectl logs job/NAME shows "
            "its output)");
}

// A persistent lead's pod is replaced like a follower's: lost past
// spec.brokerRestarts, it is a broker lost too often, not the lead lost;
// one that cannot write spec.flux.state's claim says so.
TEST(Status, APersistentLeadFailsAsAnyBrokerOrForItsStateClaim) {
  json object = MiniClusterObject();
  object["spec"].erase("command");
  const MiniCluster persistent = *ParseMiniCluster(object).minicluster;
  json job = Job(
      false,
      json::array({Condition("Failed", "True", "MaxFailedIndexesExceeded")}));
  job["status"]["failedIndexes"] = "0";
  const std::vector<json> none;
  EXPECT_EQ(Find(ComputeStatus(persistent, &job, nullptr, kNow, &none),
                 "Failed")["reason"],
            "BrokerRestartsExhausted");
  const std::vector<json> unwritable = {FailedPod(0, kStateUnwritableExit)};
  const json status =
      ComputeStatus(persistent, &job, nullptr, kNow, &unwritable);
  EXPECT_EQ(Find(status, "Failed")["reason"], "StateUnwritable");
  EXPECT_NE(Find(status, "Failed")["message"].get<std::string>().find(
                "give spec.fluxUser write access"),
            std::string::npos);
}

// LeadReplaced: absent until the lead's pod is replaced, then what the new
// lead kept (from the Job's state volume), its time kept while it holds.
TEST(Status, LeadReplacedSaysWhetherTheQueueWasKept) {
  json object = MiniClusterObject();
  object["spec"].erase("command");
  MiniCluster mc = *ParseMiniCluster(object).minicluster;
  json job = Job(false);
  auto lead = [](const char* failures, const char* ignored) {
    json pod{{"metadata",
              {{"labels", {{"batch.kubernetes.io/job-completion-index", "0"}}},
               {"annotations",
                {{"batch.kubernetes.io/job-index-failure-count", failures}}}}}};
    if (ignored != nullptr) {
      pod["metadata"]["annotations"]
         ["batch.kubernetes.io/job-index-ignored-failure-count"] = ignored;
    }
    return pod;
  };
  std::vector<json> pods = {lead("0", nullptr)};
  EXPECT_TRUE(
      Find(ComputeStatus(mc, &job, nullptr, kNow, &pods), "LeadReplaced")
          .is_null());
  pods = {lead("0", nullptr), lead("1", "1")};
  mc.status = ComputeStatus(mc, &job, nullptr, "2020-01-01T00:00:00Z", &pods);
  const json& lost = Find(mc.status, "LeadReplaced");
  EXPECT_EQ(lost["status"], "True");
  EXPECT_EQ(lost["reason"], "QueueLost");
  EXPECT_EQ(lost["message"].get<std::string>().rfind(
                "the lead pod was replaced (index 0 lost 2 times); a new, "
                "empty Flux instance started",
                0),
            0u)
      << lost;
  job["spec"]["template"]["spec"]["volumes"] =
      json::array({{{"name", "flux-state"},
                    {"persistentVolumeClaim", {{"claimName", "lab-state"}}}}});
  const json restored = ComputeStatus(mc, &job, nullptr, kNow, &pods);
  EXPECT_EQ(Find(restored, "LeadReplaced")["reason"], "QueueRestored");
  EXPECT_EQ(Find(restored, "LeadReplaced")["lastTransitionTime"],
            "2020-01-01T00:00:00Z");
  EXPECT_NE(Find(restored, "LeadReplaced")["message"].get<std::string>().find(
                "from spec.flux.state (claim lab-state)"),
            std::string::npos);
  // An ephemeral lead lost fails the MiniCluster instead.
  EXPECT_TRUE(
      Find(ComputeStatus(Mc(), &job, nullptr, kNow, &pods), "LeadReplaced")
          .is_null());
}

TEST(Status, NoJobYetIsPending) {
  const json status = ComputeStatus(Mc(), nullptr, nullptr, kNow);
  EXPECT_EQ(status["state"], "Pending");
  for (const auto& c : status["conditions"]) EXPECT_EQ(c["status"], "False");
}

TEST(Status, KeepsTransitionTimeWhileConditionStatusIsUnchanged) {
  MiniCluster mc = Mc();
  const json job = Job(false);
  mc.status = ComputeStatus(mc, &job, nullptr, "2020-01-01T00:00:00Z");
  const json later = ComputeStatus(mc, &job, nullptr, kNow);
  EXPECT_EQ(Find(later, "Running")["lastTransitionTime"],
            "2020-01-01T00:00:00Z");
  mc.status = later;
  const json done = Job(false, json::array({Condition("Complete", "True")}));
  const json finished = ComputeStatus(mc, &done, nullptr, kNow);
  EXPECT_EQ(Find(finished, "Running")["lastTransitionTime"], kNow);
  EXPECT_EQ(Find(finished, "Succeeded")["lastTransitionTime"], kNow);
  // Queued stayed False throughout.
  EXPECT_EQ(Find(finished, "Queued")["lastTransitionTime"],
            "2020-01-01T00:00:00Z");
}

TEST(Status, InvalidSpecIsFailed) {
  const json status = InvalidSpecStatus(Mc(), "spec.size: must be ...", kNow);
  ExpectOnlyTrue(status, "Failed");
  EXPECT_EQ(Find(status, "Failed")["reason"], "InvalidSpec");
}

// A tenant's value of any size, or thousands of bad values, cannot make the
// status too large for the API server (a condition's message: 32 KiB), or
// the MiniCluster would never show Failed and its TTL never fire.
TEST(Status, InvalidSpecOfAnySizeFitsTheCondition) {
  constexpr size_t kConditionMessageLimit = 32768;
  json object = MiniClusterObject();
  object["spec"]["resources"] = {
      {"limits", {{"cpu", std::string(40000, '9') + "x"}}}};
  std::string accented = "a";  // so a cut at an even byte splits an é
  for (int i = 0; i < 150; ++i) accented += "\xc3\xa9";
  for (int i = 0; i < 2000; ++i) {
    object["spec"]["podLabels"]["l" + std::to_string(i)] = accented;
  }
  object["spec"]["command"] =
      json::array({json::object({{"x", std::string(50000, 'y')}})});
  const ParseResult parsed = ParseMiniCluster(object);
  ASSERT_FALSE(parsed.ok());
  const std::string errors = parsed.ErrorText();
  EXPECT_NE(errors.find("spec.resources.limits.cpu: \"9999"), std::string::npos)
      << errors.substr(0, 300);
  EXPECT_NE(errors.find("(40003 bytes)"), std::string::npos)
      << "the cut value says how long it was";
  EXPECT_NE(errors.find("more errors"), std::string::npos);
  MiniCluster mc = Mc();
  const json status = InvalidSpecStatus(mc, errors, kNow);
  for (const json& c : status["conditions"]) {
    const std::string message = c.value("message", "");
    EXPECT_LE(message.size(), kConditionMessageLimit) << c["type"];
    // Cut on a character boundary: the API server takes only UTF-8.
    EXPECT_NO_THROW((void)json(message).dump()) << c["type"];
  }
  EXPECT_NO_THROW((void)status.dump());
}

// Degraded: a broker lost after all were up (not while wiring up), until
// every broker is ready again.
TEST(Status, DegradedWhileABrokerIsLostAfterAllWereUp) {
  MiniCluster mc = Mc();
  json job = Job(false);
  job["status"]["ready"] = 3;
  json status = ComputeStatus(mc, &job, nullptr, kNow);
  EXPECT_EQ(status["brokersReady"], 3);
  EXPECT_EQ(status["brokers"], "3/4");
  EXPECT_EQ(Find(status, "Degraded")["status"], "False") << "wiring up";

  job["status"]["ready"] = 4;
  mc.status = ComputeStatus(mc, &job, nullptr, kNow);
  EXPECT_EQ(Find(mc.status, "Degraded")["status"], "False");
  job["status"]["ready"] = 3;
  mc.status = ComputeStatus(mc, &job, nullptr, kNow);
  EXPECT_EQ(Find(mc.status, "Degraded")["status"], "True");
  EXPECT_EQ(Find(mc.status, "Degraded")["reason"], "BrokerLost");
  EXPECT_EQ(mc.status["state"], "Running");
  const std::vector<json> pods = {
      {{"metadata",
        {{"labels", {{"batch.kubernetes.io/job-completion-index", "2"}}}}},
       {"status",
        {{"conditions",
          json::array({{{"type", "DisruptionTarget"},
                        {"status", "True"},
                        {"reason", "EvictionByEvictionAPI"}}})}}}}};
  const std::string message = Find(
      ComputeStatus(mc, &job, nullptr, kNow, &pods), "Degraded")["message"];
  EXPECT_EQ(message.rfind("3 of 4 brokers ready; down: index 0 (no pod), "
                          "index 1 (no pod), index 2 (evicted), index 3 (no "
                          "pod): ",
                          0),
            0u)
      << message;
  job["status"]["ready"] = 2;  // the replacement pod starts, not ready
  mc.status = ComputeStatus(mc, &job, nullptr, kNow);
  EXPECT_EQ(Find(mc.status, "Degraded")["status"], "True");
  job["status"]["ready"] = 4;  // rejoined
  mc.status = ComputeStatus(mc, &job, nullptr, kNow);
  EXPECT_EQ(Find(mc.status, "Degraded")["status"], "False");
  EXPECT_EQ(Find(mc.status, "Degraded")["message"], "4 of 4 brokers ready");

  job["status"]["ready"] = 3;
  mc.status = ComputeStatus(mc, &job, nullptr, kNow);
  const json suspended = Job(true);  // Kueue preempted it: not a lost broker
  EXPECT_EQ(
      Find(ComputeStatus(mc, &suspended, nullptr, kNow), "Degraded")["status"],
      "False");
}

// The CRD's maxLength of a condition's message.
size_t CrdMessageMaxLength() {
  const auto text =
      common::ReadTextFile(FCC_SOURCE_DIR "/deploy/controller/crd.yaml");
  const auto docs = kube::YamlToJson(text.value());
  const json& status = (*docs)[0]["spec"]["versions"][0]["schema"]
                              ["openAPIV3Schema"]["properties"]["status"];
  return status["properties"]["conditions"]["items"]["properties"]["message"]
               ["maxLength"]
                   .get<size_t>();
}

// 3,000 brokers of 5,000 lost: the Degraded message names a few and counts
// the rest, so the status stays within the CRD's limits (the API server
// refuses a status apply with one message too long, freezing it all).
TEST(Status, ALargeDegradedMiniClustersMessageFitsTheCrd) {
  json object = MiniClusterObject();
  object["spec"]["size"] = 5000;
  MiniCluster mc = *ParseMiniCluster(object).minicluster;
  json job = Job(false);
  job["status"]["active"] = 5000;
  job["status"]["ready"] = 5000;
  mc.status = ComputeStatus(mc, &job, nullptr, kNow);
  std::vector<json> pods;
  for (int index = 0; index < 2000; ++index) {
    pods.push_back({{"metadata",
                     {{"labels",
                       {{"batch.kubernetes.io/job-completion-index",
                         std::to_string(index)}}}}},
                    {"status",
                     {{"conditions", json::array({{{"type", "Ready"},
                                                   {"status", "True"}}})}}}});
  }
  job["status"]["ready"] = 2000;
  const json status = ComputeStatus(mc, &job, nullptr, kNow, &pods);
  const std::string message = Find(status, "Degraded")["message"];
  EXPECT_EQ(Find(status, "Degraded")["status"], "True");
  EXPECT_LE(message.size(), CrdMessageMaxLength()) << message.substr(0, 300);
  EXPECT_NE(message.find("index 2000 (no pod), "), std::string::npos);
  EXPECT_NE(message.find("and 2980 more: "), std::string::npos)
      << message.substr(0, 1000);
}

// Kueue admitted 2 of 4 (partial admission sets the Job's parallelism):
// the status says so, and 2 ready is whole, not degraded.
TEST(Status, PartialAdmissionShowsTheAdmittedCount) {
  MiniCluster mc = Mc({{kQueueNameLabel, "user-queue"}});
  json job = Job(false);
  job["spec"]["parallelism"] = 2;
  job["status"]["active"] = 2;
  job["status"]["ready"] = 2;
  mc.status = ComputeStatus(mc, &job, nullptr, kNow);
  EXPECT_EQ(mc.status["brokersAdmitted"], 2);
  EXPECT_EQ(mc.status["brokers"], "2/2 (of 4)");
  EXPECT_EQ(Find(mc.status, "Running")["message"],
            "2 of 4 brokers admitted (Kueue partial admission); 2 of 2 broker "
            "pods active, 2 ready");
  EXPECT_EQ(Find(mc.status, "Degraded")["status"], "False");
  EXPECT_EQ(Find(mc.status, "Degraded")["message"], "2 of 2 brokers ready");
  job["status"]["ready"] = 1;
  mc.status = ComputeStatus(mc, &job, nullptr, kNow);
  EXPECT_EQ(Find(mc.status, "Degraded")["status"], "True");

  job["spec"]["parallelism"] = 4;  // all admitted: no "(of 4)"
  EXPECT_EQ(ComputeStatus(mc, &job, nullptr, kNow)["brokers"], "1/4");
}

TEST(Status, FluxResourcesFromTheJobsBrokerContainer) {
  json object = MiniClusterObject();
  object["spec"]["resources"] = {{"limits", {{"cpu", "2"}}}};
  const MiniCluster mc = *ParseMiniCluster(object).minicluster;
  const json job = DesiredJob(mc, DesiredOptions{});
  EXPECT_EQ(ComputeStatus(mc, &job, nullptr, kNow)["fluxResources"],
            json({{"source", "pod"}, {"cores", 2}, {"gpus", 0}}));
  EXPECT_FALSE(
      ComputeStatus(mc, nullptr, nullptr, kNow).contains("fluxResources"));
}

TEST(FindWorkloadForJob, MatchesOwnerUidOrJobUidLabel) {
  const json job = Job(true);
  std::vector<json> workloads = {
      {{"metadata",
        {{"name", "other"},
         {"ownerReferences", json::array({{{"kind", "Job"}, {"uid", "x"}}})}}}},
      {{"metadata",
        {{"name", "mine"},
         {"ownerReferences",
          json::array({{{"kind", "Job"}, {"uid", "job-uid"}}})}}}}};
  ASSERT_NE(FindWorkloadForJob(workloads, job), nullptr);
  EXPECT_EQ((*FindWorkloadForJob(workloads, job))["metadata"]["name"], "mine");
  workloads.pop_back();
  EXPECT_EQ(FindWorkloadForJob(workloads, job), nullptr);
  workloads.push_back(
      {{"metadata",
        {{"name", "labelled"},
         {"labels", {{"kueue.x-k8s.io/job-uid", "job-uid"}}}}}});
  EXPECT_EQ((*FindWorkloadForJob(workloads, job))["metadata"]["name"],
            "labelled");
}

}  // namespace
}  // namespace fcc::controller
