// The view publisher under injected faults, through HostFs: the same codes
// as the cert path for the same faults (a full disk is RESOURCE_EXHAUSTED,
// not INTERNAL that kubelet retries as a driver bug), and nothing left or
// counted. No root, no real mounts: FakeHostFs.
#include <gtest/gtest.h>

#include <cerrno>

#include "csi_client.h"
#include "driver/view/publisher.h"
#include "driver/volume_count.h"
#include "driver/volume_request.h"
#include "fake_host_fs.h"

namespace fcc::testing {
namespace {

using grpc::StatusCode;

class ViewPublisherFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pod_.pods_dir = "/var/lib/kubelet/pods";
    pod_.volume_name = "flux-view";
    const std::string target = KubeletTargetPath(pod_);
    fake_.AddDir(target.substr(0, target.rfind('/')));
    auto spec = driver::ValidateViewPublishRequest(
        KubeletPublishRequest(pod_, {{"view", "flux-core-0.88.0"}}));
    ASSERT_TRUE(spec) << spec.error().message;
    spec_ = *spec;
  }

  FakeHostFs fake_;
  FaultyHostFs faulty_{fake_};
  driver::ViewCatalog views_{
      {driver::View{"flux-core-0.88.0", "sha256:00", "/store/flux-core", {}}},
      {}};
  driver::VolumeCount count_{driver::VolumeCaps{}};
  driver::ViewPublisher publisher_{faulty_, views_, count_};
  KubeletPod pod_;
  driver::ViewPublishSpec spec_;
};

TEST_F(ViewPublisherFaultTest, TheTargetDirectoryFailsAsTheCertPathDoes) {
  int injected = 0;
  for (const auto& [err, code] :
       {std::pair{ENOSPC, StatusCode::RESOURCE_EXHAUSTED},
        std::pair{EIO, StatusCode::INTERNAL},
        std::pair{ENOENT, StatusCode::FAILED_PRECONDITION}}) {
    const std::string before = fake_.Dump();
    faulty_.Fail(Op::kMakeDir, err, 1);
    const grpc::Status status = publisher_.Publish(spec_);
    EXPECT_EQ(faulty_.Injected(), ++injected);
    EXPECT_EQ(status.error_code(), code)
        << strerror(err) << ": " << status.error_message();
    EXPECT_NE(status.error_message().find(spec_.target_path), std::string::npos)
        << status.error_message();
    EXPECT_EQ(fake_.Dump(), before) << "a failed publish left something";
    EXPECT_EQ(count_.GetStats().volumes, 0u) << "a failed publish counted";
    faulty_.Clear();
  }
}

}  // namespace
}  // namespace fcc::testing
