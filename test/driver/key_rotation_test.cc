// A master key rotation on a running driver: kubelet swaps the Secret
// volume's ..data while publishes run. None fails, every cert comes from the
// key its volume names, a key added is used from the next publish on, and a
// key removed refuses new publishes while its volumes stay as they are.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <iostream>
#include <map>
#include <thread>

#include "csi_client.h"
#include "curve/minicluster_cert.h"
#include "driver_process.h"
#include "driver_test_env.h"
#include "mount_env.h"
#include "secret_volume.h"

namespace fcc::testing {
namespace {

const std::string kMaster(64, 'm');
const std::string kSecond(64, 's');
constexpr char kGeneration[] = "5f0e7a3c-1111-4000-8000-00000000000a";

std::string ExpectedCert(const std::string& key, const std::string& name) {
  return std::string(curve::MakeMiniClusterCert(curve::Secret(key),
                                                {"default", name, kGeneration})
                         .text.reveal());
}

std::map<std::string, std::string> Attrs(const std::string& name,
                                         const std::string& key_id) {
  std::map<std::string, std::string> attrs{
      {"minicluster", name}, {"generation", kGeneration}, {"owner", "0"}};
  if (!key_id.empty()) attrs["key-id"] = key_id;
  return attrs;
}

class KeyRotationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FCC_REQUIRE_MOUNT_ENV();
    root_ = std::make_unique<ScratchRoot>();
    keys_ = std::make_unique<SecretVolume>(root_->path() + "/master-keys");
    keys_->Write({{"master.key", kMaster}});
    auto options = NodeOptions(*root_, "node-a", keys_->dir() + "/master.key");
    options.extra_args = {"--master-key-dir=" + keys_->dir()};
    log_path_ = options.log_path;
    driver_ = std::make_unique<DriverProcess>(options);
    ASSERT_TRUE(driver_->Start()) << ReadFileOrEmpty(log_path_);
    client_ = std::make_unique<CsiClient>(options.socket_path);
  }

  void TearDown() override {
    if (!root_) return;
    EXPECT_TRUE(MountsUnder(root_->pods_dir()).empty());
    client_.reset();
    if (driver_) EXPECT_EQ(driver_->Terminate(), 0);
    // No key byte reaches the log, whatever was refused or reloaded.
    const std::string log = ReadFileOrEmpty(log_path_);
    EXPECT_EQ(log.find(kMaster.substr(0, 16)), std::string::npos);
    EXPECT_EQ(log.find(kSecond.substr(0, 16)), std::string::npos);
  }

  KubeletPod Pod(int n) const {
    KubeletPod pod;
    pod.pods_dir = root_->pods_dir();
    pod.name = "pod-" + std::to_string(n);
    pod.uid = "0a000000-0000-4000-8000-" + fmt::format("{:012}", n);
    KubeletPrepareParent(pod);
    return pod;
  }

  std::unique_ptr<ScratchRoot> root_;
  std::unique_ptr<SecretVolume> keys_;
  std::string log_path_;
  std::unique_ptr<DriverProcess> driver_;
  std::unique_ptr<CsiClient> client_;
};

TEST_F(KeyRotationTest, SwapsDuringPublishesFailNoneAndTheNewKeyServesNext) {
  // kubelet rewrites the volume again and again (a key added and dropped
  // each time) while pods of two MiniClusters publish and unpublish: one
  // without key-id, one naming the default key.
  std::atomic<bool> publishing{true};
  std::thread swapper([&] {
    for (int i = 0; publishing; ++i) {
      keys_->Write({{"master.key", kMaster},
                    {"spare-" + std::to_string(i % 4) + ".key", kSecond}});
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  constexpr int kPublishes = 300;
  int failed = 0, wrong = 0;
  for (int n = 0; n < kPublishes; ++n) {
    const KubeletPod pod = Pod(n);
    const std::string name = n % 2 ? "lammps" : "gromacs";
    const auto request =
        KubeletPublishRequest(pod, Attrs(name, n % 2 ? "" : "master"));
    const auto status = client_->Publish(request);
    if (!status.ok()) {
      ++failed;
      ADD_FAILURE() << "publish " << n << ": " << status.error_message();
      continue;
    }
    const std::string target = KubeletTargetPath(pod);
    if (ReadFileOrEmpty(target + "/curve.cert") != ExpectedCert(kMaster, name))
      ++wrong;
    EXPECT_TRUE(client_->Unpublish(request.volume_id(), target).ok());
  }
  publishing = false;
  swapper.join();
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(wrong, 0);
  // The publishes met the swaps: the driver reloaded many times.
  const std::string log = ReadFileOrEmpty(log_path_);
  int reloads = 0;
  for (size_t at = log.find("master keys loaded: master, spare-");
       at != std::string::npos;
       at = log.find("master keys loaded: master, spare-", at + 1)) {
    ++reloads;
  }
  EXPECT_GE(reloads, 20) << log;
  std::cout << "[ rotation ] " << kPublishes << " publishes, " << reloads
            << " reloads\n";

  // A key added: the very next publish that names it gets its cert.
  keys_->Write({{"master.key", kMaster}, {"k2.key", kSecond}});
  const KubeletPod on_k2 = Pod(1000);
  const auto k2_request = KubeletPublishRequest(on_k2, Attrs("lammps", "k2"));
  const auto status = client_->Publish(k2_request);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const std::string k2_target = KubeletTargetPath(on_k2);
  EXPECT_EQ(ReadFileOrEmpty(k2_target + "/curve.cert"),
            ExpectedCert(kSecond, "lammps"));

  // Removed: its volume stays as it is; a new publish naming it is refused
  // with the id and the fix, and leaves nothing mounted.
  keys_->Write({{"master.key", kMaster}});
  const KubeletPod late = Pod(1001);
  const auto late_request = KubeletPublishRequest(late, Attrs("lammps", "k2"));
  const auto refused = client_->Publish(late_request);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find("master key \"k2\""),
            std::string::npos)
      << refused.error_message();
  EXPECT_NE(refused.error_message().find("add k2.key to that Secret"),
            std::string::npos);
  EXPECT_EQ(MountCountAt(KubeletTargetPath(late)), 0);
  EXPECT_EQ(ReadFileOrEmpty(k2_target + "/curve.cert"),
            ExpectedCert(kSecond, "lammps"));
  EXPECT_TRUE(client_->Unpublish(k2_request.volume_id(), k2_target).ok());
}

}  // namespace
}  // namespace fcc::testing
