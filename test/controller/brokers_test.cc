#include "controller/brokers.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fcc::controller {
namespace {

using nlohmann::json;

json Pod(int index, const std::string& created, bool ready) {
  return json{
      {"metadata",
       {{"name", "mc-" + std::to_string(index) + "-" + created},
        {"creationTimestamp", "2026-12-03T10:00:" + created + "Z"},
        {"labels",
         {{"batch.kubernetes.io/job-completion-index", std::to_string(index)},
          {"minicluster.dev/name", "mc"}}},
        {"annotations", {{"big", std::string(1000, 'x')}}}}},
      {"spec", {{"containers", json::array({{{"name", "flux-broker"}}})}}},
      {"status",
       {{"phase", ready ? "Running" : "Pending"},
        {"conditions", json::array({{{"type", "Ready"},
                                     {"status", ready ? "True" : "False"},
                                     {"lastTransitionTime", "x"}}})}}}};
}

json Terminated(json pod, int code, const std::string& reason) {
  pod["status"]["phase"] = "Failed";
  pod["status"]["containerStatuses"] = json::array(
      {{{"name", "flux-broker"},
        {"state",
         {{"terminated", {{"exitCode", code}, {"reason", reason}}}}}}});
  return pod;
}

json Disrupted(json pod, const std::string& reason) {
  pod["status"]["conditions"].push_back(
      {{"type", "DisruptionTarget"}, {"status", "True"}, {"reason", reason}});
  pod["metadata"]["deletionTimestamp"] = "2026-12-03T10:01:00Z";
  return pod;
}

std::vector<json> Trimmed(std::vector<json> pods) {
  for (json& pod : pods) TrimPodForCache(pod);
  return pods;
}

TEST(DownBrokers, NoneWhenEveryIndexHasAReadyPod) {
  EXPECT_EQ(DownBrokers(Trimmed({Pod(0, "00", true), Pod(1, "00", true),
                                 Terminated(Pod(1, "00", false), 75, "Error"),
                                 Pod(2, "00", true)}),
                        3),
            "");
}

TEST(DownBrokers, NamesEachDownIndexWithItsPodsReason) {
  const auto pods = Trimmed(
      {Pod(0, "00", true),
       Disrupted(Pod(1, "00", false), "EvictionByEvictionAPI"),
       Terminated(Pod(2, "00", false), 137, "OOMKilled"), Pod(2, "30", false),
       Terminated(Pod(3, "00", false), 75, "Error"), Pod(3, "30", false),
       Disrupted(Pod(4, "00", false), "DeletionByPodGC"), Pod(5, "10", false)});
  EXPECT_EQ(DownBrokers(pods, 7),
            "index 1 (evicted), index 2 (OOMKilled), index 3 (broker stopped "
            "(exit 75)), index 4 (node lost), index 5 (replacement starting), "
            "index 6 (no pod)");
}

TEST(DownBrokers, ADeletedPodIsDeletedAndTheNewestReasonWins) {
  json deleted = Pod(1, "20", true);
  deleted["metadata"]["deletionTimestamp"] = "2026-12-03T10:01:00Z";
  const auto pods =
      Trimmed({Pod(0, "00", true), Terminated(Pod(1, "00", false), 3, "Error"),
               deleted});
  EXPECT_EQ(DownBrokers(pods, 2), "index 1 (pod deleted)");
}

// A large MiniCluster's down list is cut after kMaxDownListed indexes: it
// goes into a condition message the CRD caps.
TEST(DownBrokers, ListsTheFirstFewAndCountsTheRest) {
  std::vector<json> pods;
  for (int index = 0; index < 3000; index += 2) {
    pods.push_back(Pod(index, "00", true));
  }
  const std::string down = DownBrokers(Trimmed(pods), 3000);
  EXPECT_EQ(down.rfind("index 1 (no pod), index 3 (no pod), ", 0), 0u) << down;
  EXPECT_NE(down.find(", index 39 (no pod), and 1480 more"), std::string::npos)
      << down.substr(0, 2000);
  EXPECT_TRUE(down.ends_with("index 39 (no pod), and 1480 more"))
      << down.substr(0, 2000);
  // At the limit, every index is named and nothing is "more".
  EXPECT_EQ(DownBrokers({}, kMaxDownListed).find("more"), std::string::npos);
}

json Running(json pod, const std::string& started, const std::string& unready) {
  pod["status"]["phase"] = "Running";
  pod["status"]["conditions"][0]["lastTransitionTime"] = unready;
  pod["status"]["containerStatuses"] =
      json::array({{{"name", "flux-broker"},
                    {"ready", false},
                    {"state", {{"running", {{"startedAt", started}}}}}}});
  return pod;
}

// A broker whose Ready went False after it started had been up: its probe
// says why (not in run, or its rank drained, excluded, torpid or not in
// R). A new pod's Ready is False from before its broker starts.
TEST(DownBrokers, ABrokerUnreadySinceItStartedIsNotUsable) {
  const auto pods =
      Trimmed({Pod(0, "00", true),
               Running(Pod(1, "00", false), "2026-12-03T10:00:05Z",
                       "2026-12-03T10:02:00Z"),
               Running(Pod(2, "00", false), "2026-12-03T10:00:05Z",
                       "2026-12-03T10:00:01Z"),
               Running(Pod(3, "00", false), "2026-12-03T10:00:05Z",
                       "2026-12-03T10:00:05Z")});
  EXPECT_EQ(DownBrokers(pods, 4),
            "index 1 (not usable: its readiness probe says why), index 2 "
            "(replacement starting), index 3 (replacement starting)");
}

// The Job controller's failure counts on index 0's pods, counted and
// ignored (a disruption), the newest's sum; other indexes do not count.
TEST(LeadReplacements, SumsTheFailureCountsOfTheLeadsIndex) {
  auto counted = [](json pod, const char* key, const char* value) {
    pod["metadata"]["annotations"]
       [std::string("batch.kubernetes.io/job-index-") + key] = value;
    return pod;
  };
  EXPECT_EQ(LeadReplacements(Trimmed({Pod(0, "00", true)})), 0);
  EXPECT_EQ(LeadReplacements(
                Trimmed({counted(Pod(2, "00", true), "failure-count", "3")})),
            0);
  EXPECT_EQ(LeadReplacements(Trimmed(
                {counted(Pod(0, "00", false), "failure-count", "0"),
                 counted(counted(Pod(0, "01", true), "failure-count", "1"),
                         "ignored-failure-count", "2")})),
            3);
  EXPECT_EQ(LeadReplacements(
                Trimmed({counted(Pod(0, "00", true), "failure-count", "x1")})),
            0);
}

TEST(TrimPodForCache, KeepsWhatDownBrokersReadsAndNoMore) {
  json pod = Disrupted(Terminated(Pod(2, "00", false), 75, "Error"),
                       "PreemptionByScheduler");
  pod["metadata"]["ownerReferences"] = json::array(
      {{{"kind", "Job"}, {"name", "mc"}, {"uid", "u1"}, {"controller", true}}});
  pod["spec"]["containers"] = json::array({{{"name", "flux-broker"}}});
  TrimPodForCache(pod);
  EXPECT_FALSE(pod.contains("spec"));
  EXPECT_FALSE(pod["metadata"].contains("annotations"));
  // Of the spec, only the node (spec.topology's domains).
  json placed = Pod(1, "00", true);
  placed["spec"] = {{"nodeName", "n2"}, {"containers", json::array()}};
  placed["metadata"]["annotations"][kTopologyAnnotation] = "x";
  TrimPodForCache(placed);
  EXPECT_EQ(placed["spec"], (json{{"nodeName", "n2"}}));
  EXPECT_EQ(placed["metadata"]["annotations"][kTopologyAnnotation], "x");
  json replaced = Pod(0, "00", true);
  replaced["metadata"]["annotations"]
          ["batch.kubernetes.io/job-index-failure-count"] = "2";
  TrimPodForCache(replaced);
  EXPECT_EQ(replaced["metadata"]["annotations"],
            (json{{"batch.kubernetes.io/job-index-failure-count", "2"}}));
  EXPECT_EQ(pod["metadata"]["labels"].size(), 1u);
  EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["uid"], "u1");
  EXPECT_EQ(pod["status"]["conditions"].size(), 2u);
  EXPECT_EQ(DownBrokers({pod}, 3),
            "index 0 (no pod), index 1 (no pod), index 2 (preempted by the "
            "scheduler)");
}

}  // namespace
}  // namespace fcc::controller
