// Kubelet-like lifecycle over the real unix socket with real mounts.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "csi_client.h"
#include "curve/cert_file.h"
#include "driver_process.h"
#include "mount_env.h"

namespace fcc::testing {
namespace {

class LifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FCC_REQUIRE_MOUNT_ENV();
    root_ = std::make_unique<ScratchRoot>();
    master_key_ = root_->WriteMasterKey("master.key", std::string(64, 'k'));
    driver_ = std::make_unique<DriverProcess>(
        DriverProcess::Options{.socket_path = root_->socket_path("node-a"),
                               .master_key_file = master_key_,
                               .log_path = root_->log_path("node-a")});
    ASSERT_TRUE(driver_->Start()) << ReadFileOrEmpty(root_->log_path("node-a"));
    client_ = std::make_unique<CsiClient>(root_->socket_path("node-a"));
    pod_.pods_dir = root_->pods_dir();
    KubeletPrepareParent(pod_);
  }

  std::unique_ptr<ScratchRoot> root_;
  std::string master_key_;
  std::unique_ptr<DriverProcess> driver_;
  std::unique_ptr<CsiClient> client_;
  KubeletPod pod_;
};

TEST_F(LifecycleTest, PublishTwiceUnpublishTwice) {
  const auto request = KubeletPublishRequest(
      pod_, {{"minicluster", "lammps"}, {"owner", "1000:1000"}});
  const std::string target = KubeletTargetPath(pod_);

  auto status = client_->Publish(request);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(MountCountAt(target), 1);
  auto mounts = MountsUnder(target);
  ASSERT_EQ(mounts.size(), 1u);
  EXPECT_EQ(mounts[0].fs_type, "tmpfs");
  EXPECT_EQ(mounts[0].source, "curve.minicluster.dev");
  EXPECT_NE(mounts[0].super_options.find("ro"), std::string::npos);

  struct stat st {};
  ASSERT_EQ(stat((target + "/curve.cert").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0400u);
  EXPECT_EQ(st.st_uid, 1000u);
  EXPECT_EQ(st.st_gid, 1000u);
  auto cert = curve::LoadCertFile(target + "/curve.cert");
  ASSERT_TRUE(cert) << cert.error();
  EXPECT_EQ(cert->metadata.at("name"), "default.lammps");

  status = client_->Publish(request);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(MountCountAt(target), 1) << "a second publish stacked a mount";

  status = client_->Unpublish(request.volume_id(), target);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(MountCountAt(target), 0);
  EXPECT_FALSE(std::filesystem::exists(target));

  status = client_->Unpublish(request.volume_id(), target);
  EXPECT_TRUE(status.ok()) << status.error_message();
}

}  // namespace
}  // namespace fcc::testing
