#include "controller/copied_job.h"

#include <gtest/gtest.h>

#include "controller/reconciler.h"
#include "test_objects.h"

namespace fcc::controller {
namespace {

using nlohmann::json;
using testing::CopiedJob;
using testing::MiniClusterObject;

const DesiredOptions kOptions;

MiniCluster Parsed(const json& object) {
  return *ParseMiniCluster(object).minicluster;
}

json WithPort(json mc_object, int port) {
  mc_object["spec"]["brokerPort"] = port;
  return mc_object;
}

TEST(CopiedJob, IsRecognisedWholeAndAsTheCacheKeepsIt) {
  json job = CopiedJob(MiniClusterObject());
  EXPECT_TRUE(IsCopiedMiniClusterJob(job));
  TrimJobForCache(job);
  EXPECT_TRUE(IsCopiedMiniClusterJob(job)) << job.dump();
}

TEST(CopiedJob, OtherJobsAreNot) {
  const json copied = CopiedJob(MiniClusterObject());
  json local = copied;  // the manager's own Job
  local["metadata"]["labels"].erase(kMultiKueueOriginLabel);
  EXPECT_FALSE(IsCopiedMiniClusterJob(local));
  json foreign_name = copied;  // labelled for another MiniCluster
  foreign_name["metadata"]["labels"][kNameLabel] = "other";
  EXPECT_FALSE(IsCopiedMiniClusterJob(foreign_name));
  json unmanaged = copied;
  unmanaged["metadata"]["labels"][kManagedByLabel] = "someone";
  EXPECT_FALSE(IsCopiedMiniClusterJob(unmanaged));
  json no_volume = copied;  // a user's Job with the controller's labels
  no_volume["spec"]["template"]["spec"]["volumes"] = json::array();
  EXPECT_FALSE(IsCopiedMiniClusterJob(no_volume));
}

// The brokers resolve <pod>.<service> the same way on a worker as where
// the MiniCluster is: same name, selector and port as DesiredService, but
// owned by the copied Job, which the garbage collector then follows.
TEST(CopiedJob, GetsItsMiniClustersServiceAndPolicyOwnedByTheJob) {
  const json mc_object = WithPort(MiniClusterObject(), 9123);
  json job = CopiedJob(mc_object);
  TrimJobForCache(job);  // what the reconciler reads
  const auto got = DesiredForCopiedJob(job, kOptions);
  ASSERT_TRUE(got.has_value()) << got.error();
  const MiniCluster mc = Parsed(mc_object);
  const json want_service = DesiredService(mc, kOptions);
  const json want_policy = DesiredNetworkPolicy(mc);
  EXPECT_EQ(got->service["spec"], want_service["spec"]);
  EXPECT_EQ(got->service["spec"]["ports"][0]["port"], 9123);
  EXPECT_EQ(got->network_policy["spec"], want_policy["spec"]);
  for (const json* object : {&got->service, &got->network_policy}) {
    const json& meta = (*object)["metadata"];
    EXPECT_EQ(meta["name"], "demo");
    EXPECT_EQ(meta["namespace"], "science");
    EXPECT_EQ(meta["labels"][kMultiKueueOriginLabel], "multikueue");
    EXPECT_EQ(meta["labels"][kNameLabel], "demo");
    EXPECT_EQ(meta["ownerReferences"],
              json::parse(R"([{"apiVersion": "batch/v1", "kind": "Job",
                "name": "demo", "uid": "worker-job-uid", "controller": true}])"));
  }
}

TEST(CopiedJob, WithoutWhatTheServiceComesFromIsAnError) {
  json other_subdomain = CopiedJob(MiniClusterObject());
  other_subdomain["spec"]["template"]["spec"]["subdomain"] = "elsewhere";
  const auto subdomain = DesiredForCopiedJob(other_subdomain, kOptions);
  ASSERT_FALSE(subdomain.has_value());
  EXPECT_NE(subdomain.error().find("subdomain"), std::string::npos);
  json no_port = CopiedJob(MiniClusterObject());
  no_port["spec"]["template"]["spec"]["containers"][0].erase("ports");
  const auto port = DesiredForCopiedJob(no_port, kOptions);
  ASSERT_FALSE(port.has_value());
  EXPECT_NE(port.error().find("containerPort"), std::string::npos);
}

std::vector<Action::Kind> Kinds(const std::vector<Action>& actions) {
  std::vector<Action::Kind> kinds;
  for (const auto& a : actions) kinds.push_back(a.kind);
  return kinds;
}

TEST(PlanCopiedJob, CreatesWhatIsMissingAndLeavesOthersAlone) {
  const json job = CopiedJob(MiniClusterObject());
  const CopiedJobObjects want = *DesiredForCopiedJob(job, kOptions);
  using K = Action::Kind;
  EXPECT_EQ(Kinds(PlanCopiedJob(want, job, nullptr, nullptr)),
            (std::vector<K>{K::kCreateService, K::kCreateNetworkPolicy}));
  EXPECT_EQ(PlanCopiedJob(want, job, nullptr, nullptr)[0].path,
            "/api/v1/namespaces/science/services");
  // Both there, as made: nothing to do.
  EXPECT_TRUE(
      PlanCopiedJob(want, job, &want.service, &want.network_policy).empty());
  // Drifted: applied back.
  json drifted = want.service;
  drifted["spec"]["publishNotReadyAddresses"] = false;
  EXPECT_EQ(Kinds(PlanCopiedJob(want, job, &drifted, &want.network_policy)),
            (std::vector<K>{K::kApplyService}));
  // Someone else's: left alone.
  json theirs = drifted;
  theirs["metadata"]["ownerReferences"][0]["uid"] = "another";
  EXPECT_TRUE(PlanCopiedJob(want, job, &theirs, &want.network_policy).empty());
  // A Job being deleted gets nothing new.
  json deleting = job;
  deleting["metadata"]["deletionTimestamp"] = "2026-01-02T03:04:05Z";
  EXPECT_TRUE(PlanCopiedJob(want, deleting, nullptr, nullptr).empty());
}

}  // namespace
}  // namespace fcc::controller
