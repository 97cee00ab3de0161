// Crash safety: kill -9 the driver at a random point during 1,000
// concurrent publishes and unpublishes (16 kubelet threads), 20 rounds.
// After each kill every target must be fully published or not mounted (or,
// with mount(2) in the crash_mount2 entry, half-made by an operation in
// flight), and every acknowledged operation must have stuck; after the
// restart the remaining operations and a repeated publish/unpublish "from
// kubelet" converge, and the mount table ends with no leaked or stacked
// mount.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "real_env.h"

namespace fcc::testing {
namespace {

constexpr int kRounds = 20;
constexpr int kOpsPerRound = 1000;
constexpr int kThreads = 16;
constexpr int kPodsPerThread = 4;  // kubelet serialises a volume's calls
constexpr int kPods = kThreads * kPodsPerThread;

std::string LogTail(const std::string& text, int lines) {
  size_t at = text.size();
  while (lines-- > 0 && at > 0) {
    at = text.rfind('\n', at - 1);
    if (at == std::string::npos) return text;
  }
  return text.substr(at);
}

struct PodState {
  KubeletPod pod;
  std::string minicluster;
  uid_t owner = 0;
  bool want_published = false;  // the last operation asked for
  bool acked = true;            // ...and the driver answered OK
};

class CrashTest : public RealDriverTest {
 protected:
  grpc::Status Apply(CsiClient& client, PodState& s, bool publish) {
    s.want_published = publish;
    s.acked = false;
    const grpc::Status status =
        publish ? client.Publish(KubeletPublishRequest(
                      s.pod, {{"minicluster", s.minicluster},
                              {"owner", std::to_string(s.owner)}}))
                : client.Unpublish(KubeletVolumeId(s.pod),
                                   KubeletTargetPath(s.pod));
    s.acked = status.ok();
    return status;
  }

  VolumeReport Look(const PodState& s) {
    return InspectVolume(KubeletTargetPath(s.pod),
                         Cert("default", s.minicluster), s.owner, s.owner);
  }

  // A driver that closed its connections on its own (a sanitizer report
  // ends the process) says why only in its log, which is deleted with the
  // test's root.
  std::string WithLogTail(const std::string& failure) const {
    return failure + "\n--- the driver's log, last lines:\n" +
           LogTail(log(), 150);
  }

  std::vector<PodState> pods_;
};

TEST_F(CrashTest, Kill9DuringConcurrentPublishAndUnpublish) {
  const char* seed_env = getenv("FCC_CRASH_SEED");
  const unsigned seed =
      seed_env ? std::strtoul(seed_env, nullptr, 10) : std::random_device{}();
  SCOPED_TRACE("FCC_CRASH_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int i = 0; i < kPods; ++i) {
    PodState s;
    s.pod = Pod(i);
    s.minicluster = "mc-" + std::to_string(i % 3);
    s.owner = i % 2 ? 1000 : 0;
    pods_.push_back(std::move(s));
  }

  int total_ops = 0, in_flight_at_kill = 0, repaired = 0;
  std::array<int, 5> seen{};
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const int kill_after = std::uniform_int_distribution(1, kOpsPerRound)(rng);
    const int jitter_us = std::uniform_int_distribution(0, 800)(rng);
    std::atomic<int> next{0}, completed{0}, unexpected{0};
    std::atomic<bool> killed{false};
    std::mutex mu;
    std::string first_unexpected;

    // Each thread takes op numbers until 1,000 are done; after the kill a
    // failed call (UNAVAILABLE) is retried against the restarted driver.
    auto worker = [&](int t, unsigned thread_seed) {
      std::mt19937 r(thread_seed);
      CsiClient client(driver_->options().socket_path);
      int pending = -1;  // op number to retry
      while (true) {
        const int op = pending >= 0 ? pending : next++;
        if (op >= kOpsPerRound) return;
        PodState& s = pods_[t * kPodsPerThread + r() % kPodsPerThread];
        const bool publish = r() % 100 < 60;
        const grpc::Status status = Apply(client, s, publish);
        if (status.ok()) {
          pending = -1;
          ++completed;
          continue;
        }
        if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
            killed.load()) {
          pending = op;  // the restart phase retries it
          return;
        }
        ++unexpected;
        std::lock_guard lock(mu);
        if (first_unexpected.empty()) {
          first_unexpected =
              std::to_string(static_cast<int>(status.error_code())) + ": " +
              status.error_message();
        }
        pending = -1;
      }
    };

    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t, rng());
    while (completed.load() < kill_after && next.load() < kOpsPerRound) {
      std::this_thread::yield();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(jitter_us));
    killed = true;
    client_.reset();
    driver_->Kill9();
    for (auto& th : threads) th.join();
    ASSERT_EQ(unexpected.load(), 0) << WithLogTail(first_unexpected);

    // After the kill: every target fully published or not mounted (with
    // mount(2), whose publish mounts before it writes, an operation in
    // flight may also leave it half-made, for the next publish to repair);
    // every acknowledged operation stuck.
    for (const PodState& s : pods_) {
      const VolumeReport r = Look(s);
      ++seen[static_cast<int>(r.state)];
      if (!s.acked) ++in_flight_at_kill;
      EXPECT_TRUE(
          r.state == VolumeState::kHealthy || r.state == VolumeState::kAbsent ||
          r.state == VolumeState::kPlainDir ||
          (r.state == VolumeState::kHalfMade && !s.acked && MountApiIsMount2()))
          << KubeletTargetPath(s.pod) << ": " << StateName(r.state) << " "
          << r.why;
      if (s.acked) {
        EXPECT_EQ(r.state, s.want_published ? VolumeState::kHealthy
                                            : VolumeState::kAbsent)
            << "an acknowledged operation was lost: "
            << KubeletTargetPath(s.pod) << " " << r.why;
      }
    }

    // Restart; the threads finish the round's remaining operations.
    ASSERT_NO_FATAL_FAILURE(StartDriver());
    killed = false;
    const int before_restart = completed.load();
    threads.clear();
    for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t, rng());
    for (auto& th : threads) th.join();
    ASSERT_EQ(unexpected.load(), 0) << WithLogTail(first_unexpected);
    total_ops += completed.load();
    EXPECT_GE(completed.load(), kOpsPerRound - kThreads);
    EXPECT_LT(before_restart, kOpsPerRound + 1);

    // kubelet repeats each pod's last call twice: it converges.
    for (PodState& s : pods_) {
      for (int i = 0; i < 2; ++i) {
        const auto status = Apply(*client_, s, s.want_published);
        ASSERT_TRUE(status.ok()) << status.error_message();
      }
      const VolumeReport r = Look(s);
      ASSERT_EQ(r.state,
                s.want_published ? VolumeState::kHealthy : VolumeState::kAbsent)
          << KubeletTargetPath(s.pod) << ": " << r.why;
      if (s.want_published) ++repaired;
    }
    if (HasFailure()) break;
  }

  // Unpublish everything: no leaked or stacked mount anywhere.
  for (PodState& s : pods_) ASSERT_TRUE(Apply(*client_, s, false).ok());
  EXPECT_TRUE(MountsUnder(root_->pods_dir()).empty());
  for (const PodState& s : pods_) {
    EXPECT_FALSE(Exists(KubeletTargetPath(s.pod)));
  }
  std::cout << "crash rounds: " << kRounds << ", operations: " << total_ops
            << ", operations in flight at a kill: " << in_flight_at_kill
            << ", after-kill states: healthy " << seen[2] << ", absent "
            << seen[0] << ", plain-dir " << seen[1] << ", half-made " << seen[3]
            << ", broken " << seen[4] << "\n";
}

}  // namespace
}  // namespace fcc::testing
