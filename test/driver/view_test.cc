// View volumes over the real socket with real mounts: the driver copies the
// views of its "image" (a directory) into the node's store once and binds
// that copy read-only, nosuid, nodev into each pod; the binds outlive the
// driver. A small stand-in tree plays the view here; the real view runs
// real brokers in the node tests (test/node/view_node_test.py).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "csi_client.h"
#include "driver_process.h"
#include "driver_test_env.h"
#include "mount_env.h"

namespace fcc::testing {
namespace {

constexpr char kView[] = "flux-core-0.88.0";
constexpr char kDigest[] =
    "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

void WriteText(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(
      std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

class ViewTest : public DriverTest {
 protected:
  void SetUp() override {
    FCC_REQUIRE_MOUNT_ENV();
    // The image's views, before the driver starts (the fixture starts it).
    image_views_ = ScratchPath("image-views");
    store_ = ScratchPath("store");
    const std::string view = image_views_ + "/" + kView;
    WriteText(view + "/share/flux-view/view.json",
              std::string(R"({"name": ")") + kView + R"(", "digest": ")" +
                  kDigest + R"("})");
    WriteText(view + "/bin/flux", "#!flux\n");
    std::filesystem::permissions(view + "/bin/flux",
                                 std::filesystem::perms::owner_all |
                                     std::filesystem::perms::others_exec);
    DriverTest::SetUp();
    pod_.volume_name = "flux-view";
    KubeletPrepareParent(pod_);
  }

  std::string ScratchPath(const std::string& name) const {
    // The root exists only once DriverTest::SetUp made it: a sibling dir.
    return std::filesystem::temp_directory_path().string() + "/fcc-view-" +
           std::to_string(getpid()) + "-" + name;
  }
  void TearDown() override {
    DriverTest::TearDown();
    std::filesystem::remove_all(image_views_);
    std::filesystem::remove_all(store_);
  }

  DriverProcess::Options DriverOptions() const override {
    DriverProcess::Options options = DriverTest::DriverOptions();
    options.extra_args = {"--views-dir=" + image_views_,
                          "--view-store-dir=" + store_};
    return options;
  }

  std::string StoredCopy() const {
    return store_ + "/" + kView + "@" + std::string(kDigest).substr(7, 16);
  }

  grpc::Status PublishView(const std::string& view = kView) {
    return client_->Publish(KubeletPublishRequest(pod_, {{"view", view}}));
  }
  grpc::Status Unpublish() {
    return client_->Unpublish(KubeletVolumeId(pod_), KubeletTargetPath(pod_));
  }

  // One bind of the node's copy at `target`: ro, nosuid, nodev, the same
  // inode as the copy, and nothing can be written through it, root or not.
  void ExpectViewBound(const std::string& target) {
    ASSERT_EQ(MountCountAt(target), 1);
    const MountEntry m = MountsUnder(target).at(0);
    for (const char* flag : {"ro", "nosuid", "nodev"}) {
      EXPECT_TRUE(HasToken(m.options, flag)) << flag << " not in " << m.options;
    }
    struct stat bound{}, copy{};
    ASSERT_EQ(stat(target.c_str(), &bound), 0);
    ASSERT_EQ(stat(StoredCopy().c_str(), &copy), 0);
    EXPECT_EQ(bound.st_ino, copy.st_ino);
    EXPECT_EQ(bound.st_dev, copy.st_dev);
    EXPECT_EQ(ReadFileOrEmpty(target + "/bin/flux"), "#!flux\n");
    errno = 0;
    EXPECT_EQ(open((target + "/intruder").c_str(), O_WRONLY | O_CREAT, 0600),
              -1);
    EXPECT_EQ(errno, EROFS);
  }

  std::string image_views_;
  std::string store_;
};

TEST_F(ViewTest, PublishBindsTheNodesCopyReadOnlyAndUnpublishRemovesIt) {
  const std::string target = KubeletTargetPath(pod_);
  auto status = PublishView();
  ASSERT_TRUE(status.ok()) << status.error_message() << log();
  ASSERT_NO_FATAL_FAILURE(ExpectViewBound(target));
  // kubelet's retry of a healthy publish adds no mount.
  status = PublishView();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(MountCountAt(target), 1);

  status = Unpublish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_FALSE(PathExists(target));
  EXPECT_TRUE(PathExists(StoredCopy() + "/bin/flux")) << "the copy stays";
  status = Unpublish();
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST_F(ViewTest, UnservedViewIsNotFoundNamingWhatTheNodeServes) {
  const auto status = PublishView("flux-core-0.70.0");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  const std::string& message = status.error_message();
  EXPECT_NE(message.find("\"flux-core-0.70.0\" is not served"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find(std::string("it serves: ") + kView), std::string::npos)
      << message;
  EXPECT_NE(message.find("spec.flux.view"), std::string::npos) << message;
  EXPECT_FALSE(PathExists(KubeletTargetPath(pod_)));
}

// Nothing may pose as a view: a view volume carries `view` alone, and a
// value that is no view name never reaches the filesystem.
TEST_F(ViewTest, AViewWithAnyOtherAttributeOrABadNameIsRefused) {
  for (const auto& attrs : std::vector<std::map<std::string, std::string>>{
           {{"view", kView}, {"minicluster", "lammps"}},
           {{"view", kView}, {"owner", "0"}},
           {{"view", "../../etc"}},
           {{"view", ""}}}) {
    const auto status = client_->Publish(KubeletPublishRequest(pod_, attrs));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << status.error_message();
    EXPECT_NE(status.error_message().find("volumeAttributes."),
              std::string::npos)
        << status.error_message();
    EXPECT_FALSE(PathExists(KubeletTargetPath(pod_)));
  }
}

TEST_F(ViewTest, ABindOutlivesTheDriverAndTheNextDriverUnpublishesIt) {
  const std::string target = KubeletTargetPath(pod_);
  auto status = PublishView();
  ASSERT_TRUE(status.ok()) << status.error_message();
  driver_->Kill9();
  ASSERT_NO_FATAL_FAILURE(ExpectViewBound(target));
  ASSERT_NO_FATAL_FAILURE(StartDriver());
  // The copy was made once; the restarted driver reuses it.
  EXPECT_EQ(log().find("copied to"), log().rfind("copied to")) << log();
  status = PublishView();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(MountCountAt(target), 1);
  status = Unpublish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_FALSE(PathExists(target));
}

// A pod's cert and view are two volumes; each unpublish takes only its own.
TEST_F(ViewTest, CertAndViewOfOnePodLiveSideBySide) {
  KubeletPod cert_pod = pod_;
  cert_pod.volume_name = "curve";
  KubeletPrepareParent(cert_pod);
  auto status = client_->Publish(
      KubeletPublishRequest(cert_pod, {{"minicluster", "lammps"}}));
  ASSERT_TRUE(status.ok()) << status.error_message();
  status = PublishView();
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_NO_FATAL_FAILURE(ExpectViewBound(KubeletTargetPath(pod_)));
  status = Unpublish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(MountCountAt(KubeletTargetPath(cert_pod)), 1);
  status = client_->Unpublish(KubeletVolumeId(cert_pod),
                              KubeletTargetPath(cert_pod));
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_FALSE(PathExists(KubeletTargetPath(cert_pod)));
}

// A view bind at another pod's target is left alone, and a view is never
// bound over a mount that is not this view.
TEST_F(ViewTest, AForeignMountAtTheTargetIsNotReplaced) {
  const std::string target = KubeletTargetPath(pod_);
  std::filesystem::create_directories(target);
  ASSERT_EQ(mount("fcc-test-foreign", target.c_str(), "tmpfs", 0, "size=64k"),
            0);
  const auto status = PublishView();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS)
      << status.error_message();
  EXPECT_EQ(MountCountAt(target), 1);
  EXPECT_EQ(MountsUnder(target).at(0).source, "fcc-test-foreign");
  EXPECT_EQ(Unpublish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_EQ(umount(target.c_str()), 0);
}

}  // namespace
}  // namespace fcc::testing
