// Many kubelet calls at once against one driver: 64 distinct volumes
// published and unpublished in parallel, and publish/unpublish storms on the
// same volume. The mount table must end with exactly the mounts that should
// exist, and no call may fail.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "csi_client.h"
#include "curve/cert_file.h"
#include "curve/minicluster_cert.h"
#include "driver_process.h"
#include "driver_test_env.h"
#include "mount_env.h"

namespace fcc::testing {
namespace {

constexpr int kVolumes = 64;
constexpr int kStormThreads = 16;
constexpr int kStormOpsPerThread = 50;

// A few MiniClusters differing in each part of their identity.
const curve::MiniClusterId kMiniClusters[] = {
    {"default", "lammps", ""},
    {"default", "gromacs", ""},
    {"science", "lammps", ""},
    {"science", "lammps", "uid-2"},
};
constexpr int kMiniClusterCount = std::size(kMiniClusters);

// Runs fn(0..n-1) on n threads released together. Every call fn makes is a
// gRPC call with a deadline, so joining is bounded.
void RunConcurrently(int n, const std::function<void(int)>& fn) {
  std::latch start(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      fn(i);
    });
  }
  for (auto& t : threads) t.join();
}

class ConcurrencyTest : public DriverTest {
 protected:
  KubeletPod PodFor(int i, const curve::MiniClusterId& mc) const {
    KubeletPod pod;
    pod.pods_dir = root_->pods_dir();
    pod.namespace_name = mc.namespace_name;
    pod.name = fmt::format("{}-{}", mc.name, i);
    pod.uid = fmt::format("6f1c2d3e-0000-4000-8000-{:012d}", i);
    return pod;
  }
  static std::map<std::string, std::string> AttrsFor(
      const curve::MiniClusterId& mc) {
    std::map<std::string, std::string> attrs = {{"minicluster", mc.name}};
    if (!mc.generation.empty()) attrs["generation"] = mc.generation;
    return attrs;
  }
  std::string ExpectedCert(const curve::MiniClusterId& mc) const {
    return std::string(
        curve::MakeMiniClusterCert(curve::Secret(master_key_bytes_), mc)
            .text.reveal());
  }

  // Storms publish/unpublish on one volume from many threads; returns the
  // failures (there should be none).
  std::vector<std::string> Storm(const KubeletPod& pod,
                                 const curve::MiniClusterId& mc,
                                 unsigned seed) {
    const auto request = KubeletPublishRequest(pod, AttrsFor(mc));
    std::mutex mu;
    std::vector<std::string> failures;
    RunConcurrently(kStormThreads, [&](int thread) {
      std::mt19937 rng(seed + thread);
      for (int op = 0; op < kStormOpsPerThread; ++op) {
        const bool publish = rng() % 2 == 0;
        const grpc::Status status =
            publish ? client_->Publish(request)
                    : client_->Unpublish(request.volume_id(),
                                         request.target_path());
        if (!status.ok()) {
          std::lock_guard lock(mu);
          failures.push_back(fmt::format(
              "thread {} op {} {}: code {}: {}", thread, op,
              publish ? "publish" : "unpublish",
              static_cast<int>(status.error_code()), status.error_message()));
        }
      }
    });
    return failures;
  }
};

TEST_F(ConcurrencyTest, ManyVolumesAndStormsEndWithTheRightMountTable) {
  std::vector<KubeletPod> pods;
  std::vector<int> minicluster_of;
  for (int i = 0; i < kVolumes; ++i) {
    minicluster_of.push_back(i % kMiniClusterCount);
    pods.push_back(PodFor(i, kMiniClusters[minicluster_of.back()]));
    KubeletPrepareParent(pods.back());
  }

  // 1. 64 concurrent publishes of distinct volumes.
  std::vector<grpc::Status> results(kVolumes);
  RunConcurrently(kVolumes, [&](int i) {
    results[i] = client_->Publish(KubeletPublishRequest(
        pods[i], AttrsFor(kMiniClusters[minicluster_of[i]])));
  });
  for (int i = 0; i < kVolumes; ++i) {
    EXPECT_TRUE(results[i].ok())
        << "publish " << i << ": " << results[i].error_message();
  }
  ASSERT_EQ(MountsUnder(root_->pods_dir()).size(), size_t{kVolumes});

  std::vector<std::string> bytes_by_minicluster(kMiniClusterCount);
  for (int i = 0; i < kVolumes; ++i) {
    SCOPED_TRACE(fmt::format("volume {}", i));
    const std::string target = KubeletTargetPath(pods[i]);
    EXPECT_EQ(MountCountAt(target), 1);
    const std::string cert_path = target + "/curve.cert";
    auto parsed = curve::LoadCertFile(cert_path);
    ASSERT_TRUE(parsed) << parsed.error();
    const auto& mc = kMiniClusters[minicluster_of[i]];
    EXPECT_EQ(parsed->metadata.at("name"), mc.QualifiedName());
    const std::string bytes = ReadFileOrEmpty(cert_path);
    EXPECT_EQ(bytes, ExpectedCert(mc));
    auto& same = bytes_by_minicluster[minicluster_of[i]];
    if (same.empty()) same = bytes;
    EXPECT_EQ(bytes, same) << "pods of one MiniCluster got different files";
  }
  EXPECT_EQ(std::set<std::string>(bytes_by_minicluster.begin(),
                                  bytes_by_minicluster.end())
                .size(),
            size_t{kMiniClusterCount})
      << "different MiniClusters must get different keys";

  // 2. Storms on two volumes at once: one sharing a MiniCluster with live
  // volumes, one whose MiniCluster has no other volume (its cached key is
  // dropped and re-derived over and over).
  KubeletPod shared = PodFor(1000, kMiniClusters[0]);
  const curve::MiniClusterId lonely_mc{"default", "lonely", ""};
  KubeletPod lonely = PodFor(1001, lonely_mc);
  KubeletPrepareParent(shared);
  KubeletPrepareParent(lonely);
  std::vector<std::string> shared_failures, lonely_failures;
  std::thread shared_storm(
      [&] { shared_failures = Storm(shared, kMiniClusters[0], 1); });
  lonely_failures = Storm(lonely, lonely_mc, 1000);
  shared_storm.join();
  EXPECT_TRUE(shared_failures.empty())
      << shared_failures.size() << " failures, first: " << shared_failures[0];
  EXPECT_TRUE(lonely_failures.empty())
      << lonely_failures.size() << " failures, first: " << lonely_failures[0];

  for (const auto& [pod, mc] :
       {std::pair{shared, kMiniClusters[0]}, std::pair{lonely, lonely_mc}}) {
    SCOPED_TRACE(pod.name);
    const std::string target = KubeletTargetPath(pod);
    EXPECT_LE(MountCountAt(target), 1) << "the storm stacked mounts";
    auto status = client_->Publish(KubeletPublishRequest(pod, AttrsFor(mc)));
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(MountCountAt(target), 1);
    EXPECT_EQ(ReadFileOrEmpty(target + "/curve.cert"), ExpectedCert(mc));
    status = client_->Unpublish(KubeletVolumeId(pod), target);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(MountCountAt(target), 0);
    EXPECT_FALSE(PathExists(target)) << "leftover directory";
  }
  // The 64 volumes were not disturbed by the storms.
  EXPECT_EQ(MountsUnder(root_->pods_dir()).size(), size_t{kVolumes});
  EXPECT_EQ(ReadFileOrEmpty(KubeletTargetPath(pods[0]) + "/curve.cert"),
            ExpectedCert(kMiniClusters[0]));

  // 3. Unpublish all 64 at once.
  RunConcurrently(kVolumes, [&](int i) {
    results[i] = client_->Unpublish(KubeletVolumeId(pods[i]),
                                    KubeletTargetPath(pods[i]));
  });
  for (int i = 0; i < kVolumes; ++i) {
    EXPECT_TRUE(results[i].ok())
        << "unpublish " << i << ": " << results[i].error_message();
    EXPECT_FALSE(PathExists(KubeletTargetPath(pods[i])));
  }
  EXPECT_TRUE(MountsUnder(root_->pods_dir()).empty());
  EXPECT_TRUE(client_->WaitReady(std::chrono::seconds(5)))
      << "the driver no longer answers";
}

// SIGTERM while calls are in flight: every call is answered, OK (its volume
// is then mounted) or refused without effect (UNAVAILABLE once the socket is
// closed, CANCELLED if it was still waiting for the driver's thread; kubelet
// retries both), the driver exits 0, and a restarted driver unpublishes what
// was published.
TEST_F(ConcurrencyTest, SigtermMidStormAnswersEveryCall) {
  constexpr int kThreads = 8;
  constexpr int kPodsPerThread = 250;
  std::vector<KubeletPod> pods;
  for (int i = 0; i < kThreads * kPodsPerThread; ++i) {
    pods.push_back(PodFor(i, kMiniClusters[i % kMiniClusterCount]));
    KubeletPrepareParent(pods.back());
  }
  // Each thread publishes its pods until a call fails.
  std::vector<std::optional<grpc::Status>> results(pods.size());
  std::atomic<int> answered{0};
  int exit_code = -1;
  std::thread stopper([&] {
    while (answered.load() < 40) std::this_thread::yield();
    exit_code = driver_->Terminate(std::chrono::seconds(10));
  });
  RunConcurrently(kThreads, [&](int thread) {
    for (int k = 0; k < kPodsPerThread; ++k) {
      const int i = thread * kPodsPerThread + k;
      results[i] = client_->Publish(KubeletPublishRequest(
          pods[i], AttrsFor(kMiniClusters[i % kMiniClusterCount])));
      answered.fetch_add(1);
      if (!results[i]->ok()) return;
    }
  });
  stopper.join();
  EXPECT_EQ(exit_code, 0) << log();

  int published = 0;
  int refused = 0;
  for (size_t i = 0; i < pods.size(); ++i) {
    if (!results[i]) continue;
    if (results[i]->ok()) {
      ++published;
      EXPECT_EQ(MountCountAt(KubeletTargetPath(pods[i])), 1) << "volume " << i;
    } else {
      ++refused;
      EXPECT_THAT(results[i]->error_code(),
                  ::testing::AnyOf(grpc::StatusCode::UNAVAILABLE,
                                   grpc::StatusCode::CANCELLED))
          << "volume " << i << ": " << results[i]->error_message();
    }
  }
  EXPECT_GE(published, 40);
  EXPECT_EQ(refused, kThreads) << "every thread stops at its first refusal";
  EXPECT_EQ(MountsUnder(root_->pods_dir()).size(), size_t(published));

  ASSERT_NO_FATAL_FAILURE(StartDriver());
  for (size_t i = 0; i < pods.size(); ++i) {
    if (!results[i] || !results[i]->ok()) continue;
    const grpc::Status status = client_->Unpublish(KubeletVolumeId(pods[i]),
                                                   KubeletTargetPath(pods[i]));
    EXPECT_TRUE(status.ok()) << status.error_message();
  }
  EXPECT_TRUE(MountsUnder(root_->pods_dir()).empty());
}

}  // namespace
}  // namespace fcc::testing
