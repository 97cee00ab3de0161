// A master key removed from the Secret while its volumes are mounted
// (docs/admin/key-rotation.md, "Rotating to a new key", step 5): volumes
// already mounted keep working, kubelet's re-publish of them (after a kubelet
// or driver restart) included; only a new volume naming the key is refused. No
// root: FakeHostFs for the mounts, a real directory for the key ring.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>

#include "csi_client.h"
#include "curve/minicluster_cert.h"
#include "driver/key_cache.h"
#include "driver/key_ring.h"
#include "driver/publisher.h"
#include "driver/volume_request.h"
#include "fake_host_fs.h"
#include "secret_volume.h"

namespace fcc::testing {
namespace {

using grpc::StatusCode;

constexpr char kPods[] = "/var/lib/kubelet/pods";
const std::string kMaster(64, 'm');
const std::string kSecond(64, 's');

std::string MakeTempDir() {
  char tmpl[] = "/tmp/removed-key-test-XXXXXX";
  return mkdtemp(tmpl);
}

// One driver process: its key ring, cache and publisher over the node's
// (fake) mounts, which outlive it.
struct Driver {
  explicit Driver(FakeHostFs& fs, const std::string& key_dir)
      : ring(driver::KeyRing::Open(
            {.dir = key_dir, .file = "", .default_id = "master"})) {
    if (!ring) return;
    keys = std::make_unique<driver::KeyCache>(*ring);
    publisher = std::make_unique<driver::Publisher>(fs, *keys);
  }
  std::expected<std::shared_ptr<driver::KeyRing>, std::string> ring;
  std::unique_ptr<driver::KeyCache> keys;
  std::unique_ptr<driver::Publisher> publisher;
};

class RemovedKeyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    keys_.Write({{"master.key", kMaster}, {"k2.key", kSecond}});
    driver_ = std::make_unique<Driver>(fake_, keys_.dir());
    ASSERT_TRUE(driver_->ring) << driver_->ring.error();
  }
  void TearDown() override { std::filesystem::remove_all(keys_.dir()); }

  // The volume of pod `n` of MiniCluster lammps, from key `key_id`.
  driver::PublishSpec Spec(int n, const std::string& key_id) {
    KubeletPod pod;
    pod.pods_dir = kPods;
    pod.name = "lammps-" + std::to_string(n);
    pod.uid = "0b000000-0000-4000-8000-00000000000" + std::to_string(n);
    const std::string target = KubeletTargetPath(pod);
    fake_.AddDir(target.substr(0, target.rfind('/')));
    std::map<std::string, std::string> attrs{{"minicluster", "lammps"},
                                             {"owner", "1000"}};
    if (!key_id.empty()) attrs["key-id"] = key_id;
    return driver::ValidatePublishRequest(KubeletPublishRequest(pod, attrs))
        .value();
  }
  grpc::Status Unpublish(const driver::PublishSpec& spec) {
    return driver_->publisher->Unpublish({spec.volume_id, spec.target_path});
  }

  FakeHostFs fake_;
  SecretVolume keys_{MakeTempDir()};
  std::unique_ptr<Driver> driver_;
};

TEST_F(RemovedKeyTest, KubeletsRepublishOfAMountedVolumeStaysOk) {
  const auto spec = Spec(1, "k2");
  ASSERT_TRUE(driver_->publisher->Publish(spec).ok());
  keys_.Write({{"master.key", kMaster}});  // k2 removed

  // kubelet restarted: it publishes every mounted volume again.
  auto status = driver_->publisher->Publish(spec);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(fake_.MountCount(spec.target_path), 1);
  // A new volume naming k2 is refused and leaves nothing.
  const auto late = Spec(2, "k2");
  status = driver_->publisher->Publish(late);
  EXPECT_EQ(status.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_FALSE(fake_.Exists(late.target_path));

  // The driver restarted too: it has never seen k2, and the mount is all
  // that says what the volume is.
  driver_ = std::make_unique<Driver>(fake_, keys_.dir());
  ASSERT_TRUE(driver_->ring) << driver_->ring.error();
  status = driver_->publisher->Publish(spec);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(fake_.MountCount(spec.target_path), 1);
  EXPECT_EQ(driver_->publisher->Publish(late).error_code(),
            StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(Unpublish(spec).ok());
  EXPECT_EQ(fake_.TotalMounts(), 0);
}

TEST_F(RemovedKeyTest, ARepublishIsAnsweredFromTheMountOnlyForItsOwnVolume) {
  const auto spec = Spec(1, "k2");
  ASSERT_TRUE(driver_->publisher->Publish(spec).ok());
  keys_.Write({{"master.key", kMaster}});
  driver_ = std::make_unique<Driver>(fake_, keys_.dir());
  ASSERT_TRUE(driver_->ring) << driver_->ring.error();
  // The same target asked for as another MiniCluster or owner: still the
  // missing key's refusal, nothing taken from the mount.
  auto other = spec;
  other.minicluster.name = "gromacs";
  EXPECT_EQ(driver_->publisher->Publish(other).error_code(),
            StatusCode::FAILED_PRECONDITION);
  other = spec;
  other.owner = {2000, 2000};
  EXPECT_EQ(driver_->publisher->Publish(other).error_code(),
            StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(fake_.MountCount(spec.target_path), 1);
  EXPECT_TRUE(Unpublish(spec).ok());
}

TEST_F(RemovedKeyTest, ADriverStartedWithoutTheDefaultKeyStillUnpublishes) {
  const auto on_default = Spec(1, "");
  const auto on_k2 = Spec(2, "k2");
  ASSERT_TRUE(driver_->publisher->Publish(on_default).ok());
  ASSERT_TRUE(driver_->publisher->Publish(on_k2).ok());
  keys_.Write({{"k2.key", kSecond}});  // master.key removed

  driver_ = std::make_unique<Driver>(fake_, keys_.dir());
  ASSERT_TRUE(driver_->ring) << driver_->ring.error();
  // Mounted volumes of every key: re-published and unpublished.
  EXPECT_TRUE(driver_->publisher->Publish(on_default).ok());
  EXPECT_TRUE(driver_->publisher->Publish(on_k2).ok());
  // A new volume of the default key is refused with the fix.
  const auto late = Spec(3, "");
  const auto refused = driver_->publisher->Publish(late);
  EXPECT_EQ(refused.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find("the default master key \"master\""),
            std::string::npos)
      << refused.error_message();
  EXPECT_TRUE(Unpublish(on_default).ok());
  EXPECT_TRUE(Unpublish(on_k2).ok());
  EXPECT_EQ(fake_.TotalMounts(), 0);
}

}  // namespace
}  // namespace fcc::testing
