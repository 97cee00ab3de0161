// Volume caps (issue 30, item 1), with the DaemonSet's own flags and memory
// limit: one pod gets at most --max-volumes-per-pod volumes and the node at
// most --max-volumes-per-node, refused before anything is made at the
// target. The node's count survives kill -9: a driver restarted in the same
// memory cgroup (still charged with the old process's tmpfs pages) serves
// and still refuses the volume past the cap.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <string>

#include "driver_test_env.h"

namespace fcc::testing {
namespace {

std::string DaemonSetYaml() {
  return ReadFileOrEmpty(FCC_DEPLOY_DIR "/daemonset/daemonset.yaml");
}

// "--flag=<n>" among the DaemonSet's args; 0 if it is not there.
uint64_t DaemonSetFlag(const std::string& flag) {
  const std::regex re("\\n\\s*- " + flag + "=([0-9]+)\\s*\\n");
  std::smatch m;
  const std::string yaml = DaemonSetYaml();
  return std::regex_search(yaml, m, re) ? std::stoull(m[1]) : 0;
}

// The driver container's resources.limits.memory in bytes ("<n>Mi").
uint64_t DaemonSetMemoryLimit() {
  const std::regex re("limits:\\s*\\n\\s*memory:\\s*([0-9]+)Mi\\s*\\n");
  std::smatch m;
  const std::string yaml = DaemonSetYaml();
  return std::regex_search(yaml, m, re) ? std::stoull(m[1]) << 20 : 0;
}

// A memory cgroup (v1) of the test's own, removed at the end; empty dir()
// (and why()) where this machine offers none.
class MemoryCgroup {
 public:
  explicit MemoryCgroup(uint64_t limit_bytes) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    // A sanitizer's shadow memory makes the driver several times larger
    // than the binary the DaemonSet's limit is sized for.
    why_ = "a sanitizer build, not the binary the limit is for";
    return;
#endif
    const std::string base = "/sys/fs/cgroup/memory";
    if (!std::filesystem::exists(base + "/memory.limit_in_bytes")) {
      why_ = "no cgroup v1 memory controller at " + base;
      return;
    }
    const std::string dir = base + "/fcc-caps-test-" + std::to_string(getpid());
    if (mkdir(dir.c_str(), 0755) != 0) {
      why_ = "cannot make " + dir + ": " + strerror(errno);
      return;
    }
    dir_ = dir;
    std::ofstream(dir_ + "/memory.limit_in_bytes") << limit_bytes;
  }
  ~MemoryCgroup() {
    if (!dir_.empty()) rmdir(dir_.c_str());
  }
  const std::string& dir() const { return dir_; }
  const std::string& why() const { return why_; }
  uint64_t Read(const std::string& file) const {
    uint64_t value = 0;
    std::ifstream(dir_ + "/" + file) >> value;
    return value;
  }
  // A field of memory.oom_control ("oom_kill 0").
  uint64_t OomControl(const std::string& key) const {
    std::ifstream in(dir_ + "/memory.oom_control");
    std::string name;
    uint64_t value = 0;
    while (in >> name >> value) {
      if (name == key) return value;
    }
    return UINT64_MAX;
  }

 private:
  std::string dir_;
  std::string why_;
};

class CapsTest : public DriverTest {
 protected:
  void SetUp() override {
    per_pod_ = DaemonSetFlag("--max-volumes-per-pod");
    per_node_ = DaemonSetFlag("--max-volumes-per-node");
    limit_ = DaemonSetMemoryLimit();
    ASSERT_GT(per_pod_, 0u) << "the DaemonSet sets no --max-volumes-per-pod";
    ASSERT_GT(per_node_, 0u) << "the DaemonSet sets no --max-volumes-per-node";
    ASSERT_GT(limit_, 0u) << "the DaemonSet has no memory limit in Mi";
    cgroup_ = std::make_unique<MemoryCgroup>(limit_);
    DriverTest::SetUp();
  }

  void TearDown() override {
    DriverTest::TearDown();
    root_.reset();  // unmounts every volume: the cgroup can then go
    cgroup_.reset();
  }

  DriverProcess::Options DriverOptions() const override {
    DriverProcess::Options options = DriverTest::DriverOptions();
    options.log_level = "info";
    options.extra_args = {
        "--max-volumes-per-pod=" + std::to_string(per_pod_),
        "--max-volumes-per-node=" + std::to_string(per_node_)};
    if (!cgroup_->dir().empty()) {
      options.cgroup_procs = cgroup_->dir() + "/cgroup.procs";
    }
    return options;
  }

  KubeletPod PodNumber(uint64_t i, const std::string& volume = "curve") {
    KubeletPod pod = pod_;
    char uid[64];
    snprintf(uid, sizeof(uid), "6f1c2d3e-0000-4000-9000-%012llu",
             static_cast<unsigned long long>(i));
    pod.uid = uid;
    pod.name = "lammps-" + std::to_string(i);
    pod.volume_name = volume;
    KubeletPrepareParent(pod);
    return pod;
  }

  grpc::Status Publish(const KubeletPod& pod) {
    return client_->Publish(
        KubeletPublishRequest(pod, {{"minicluster", "mc"}}));
  }

  // Refused for `flag`, with the cap in the message, and nothing made.
  void ExpectRefused(const grpc::Status& status, const KubeletPod& pod,
                     const std::string& flag, uint64_t cap) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << status.error_message();
    EXPECT_NE(status.error_message().find(flag + "=" + std::to_string(cap)),
              std::string::npos)
        << status.error_message();
    EXPECT_FALSE(PathExists(KubeletTargetPath(pod)))
        << "a refused publish made its target";
  }

  uint64_t per_pod_ = 0, per_node_ = 0, limit_ = 0;
  std::unique_ptr<MemoryCgroup> cgroup_;
};

TEST_F(CapsTest, PerPodCapRefusesTheNextVolumeBeforeMountingIt) {
  std::vector<KubeletPod> mine;
  for (uint64_t v = 0; v < per_pod_; ++v) {
    mine.push_back(PodNumber(0, "curve-" + std::to_string(v)));
    ASSERT_TRUE(Publish(mine.back()).ok());
  }
  const KubeletPod extra = PodNumber(0, "curve-extra");
  ExpectRefused(Publish(extra), extra, "--max-volumes-per-pod", per_pod_);
  // What was mounted stays, and a repeated publish of it is no new volume.
  for (const KubeletPod& pod : mine) {
    EXPECT_EQ(MountCountAt(KubeletTargetPath(pod)), 1);
    EXPECT_TRUE(Publish(pod).ok());
  }
  // Another pod is not this pod's cap.
  EXPECT_TRUE(Publish(PodNumber(1)).ok());
  // Once one of the pod's volumes is gone, the next fits.
  ASSERT_TRUE(
      client_->Unpublish(KubeletVolumeId(mine[0]), KubeletTargetPath(mine[0]))
          .ok());
  EXPECT_TRUE(Publish(extra).ok());
}

TEST_F(CapsTest, NodeCapHoldsAcrossKill9InTheSameMemoryCgroup) {
  if (!cgroup_->why().empty()) {
    std::cout << "no memory cgroup here (" << cgroup_->why()
              << "): the caps are tested, the memory limit is not\n";
  }
  csi::v1::NodeGetInfoResponse info;
  grpc::ClientContext ctx;
  ASSERT_TRUE(client_->node()
                  .NodeGetInfo(&ctx, csi::v1::NodeGetInfoRequest(), &info)
                  .ok());
  EXPECT_EQ(info.max_volumes_per_node(), static_cast<int64_t>(per_node_));

  const uint64_t usage0 = cgroup_->Read("memory.usage_in_bytes");
  const uint64_t kmem0 = cgroup_->Read("memory.kmem.usage_in_bytes");
  for (uint64_t i = 0; i < per_node_; ++i) {
    ASSERT_TRUE(Publish(PodNumber(i)).ok()) << "volume " << i << "\n" << log();
  }
  if (!cgroup_->dir().empty()) {
    const double n = static_cast<double>(per_node_);
    std::cout << "memory per volume: "
              << (cgroup_->Read("memory.usage_in_bytes") - usage0) / n
              << " bytes charged, of which kernel memory "
              << (cgroup_->Read("memory.kmem.usage_in_bytes") - kmem0) / n
              << " bytes (" << per_node_ << " volumes)\n";
  }
  const KubeletPod extra = PodNumber(per_node_);
  ExpectRefused(Publish(extra), extra, "--max-volumes-per-node", per_node_);

  // kill -9: the mounts and their charge stay; the restarted driver counts
  // them from the mount table.
  client_.reset();
  driver_->Kill9();
  ASSERT_NO_FATAL_FAILURE(StartDriver());
  ExpectRefused(Publish(extra), extra, "--max-volumes-per-node", per_node_);
  const KubeletPod first = PodNumber(0);
  EXPECT_TRUE(Publish(first).ok()) << "a repeated publish at the cap";
  ASSERT_TRUE(
      client_->Unpublish(KubeletVolumeId(first), KubeletTargetPath(first))
          .ok());
  EXPECT_TRUE(Publish(extra).ok()) << log();
  ExpectRefused(Publish(first), first, "--max-volumes-per-node", per_node_);
  EXPECT_EQ(MountsUnder(root_->pods_dir()).size(), per_node_);
  if (!cgroup_->dir().empty()) {
    EXPECT_EQ(cgroup_->OomControl("oom_kill"), 0u)
        << "the driver was OOM-killed under the DaemonSet's memory limit";
  }
}

}  // namespace
}  // namespace fcc::testing
