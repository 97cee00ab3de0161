// The view publisher under injected faults, through HostFs and ViewBinder:
// the same codes as the cert path for the same faults (a full disk is
// RESOURCE_EXHAUSTED, not INTERNAL that kubelet retries as a driver bug), a
// failed publish leaves nothing made and nothing counted, a busy target
// keeps its bind, and a later publish or unpublish converges. No root, no
// real mounts: FakeHostFs and FakeViewBinder.
#include <gtest/gtest.h>

#include <cerrno>
#include <vector>

#include "csi_client.h"
#include "driver/view/publisher.h"
#include "driver/volume_count.h"
#include "driver/volume_request.h"
#include "fake_host_fs.h"
#include "fake_view_binder.h"

namespace fcc::testing {
namespace {

using driver::ViewBindApi;
using grpc::StatusCode;

constexpr char kCopy[] = "/store/flux-core-0.88.0@0123456789abcdef";
constexpr driver::FileId kCopyId{7, 42};

class ViewPublisherFaultTest : public ::testing::TestWithParam<ViewBindApi> {
 protected:
  void SetUp() override {
    pod_.pods_dir = "/var/lib/kubelet/pods";
    pod_.volume_name = "flux-view";
    fake_.AddDir(Parent());
    fake_.AddDir(kCopy);
    binder_.SetId(kCopy, kCopyId);
    auto spec = driver::ValidateViewPublishRequest(
        KubeletPublishRequest(pod_, {{"view", "flux-core-0.88.0"}}));
    ASSERT_TRUE(spec) << spec.error().message;
    spec_ = *spec;
  }

  std::string Target() const { return spec_.target_path; }
  std::string Parent() const {
    const std::string t = KubeletTargetPath(pod_);
    return t.substr(0, t.rfind('/'));
  }

  // One sealed bind of the copy at the target, counted once.
  void ExpectBound() {
    EXPECT_EQ(fake_.MountCount(Target()), 1) << fake_.Dump();
    EXPECT_EQ(binder_.Identify(Target()).value_or(driver::FileId{}), kCopyId);
    EXPECT_TRUE(binder_.IsSealed(Target()).value_or(false));
    EXPECT_EQ(count_.GetStats().volumes, 1u);
  }
  // A publish after the fault binds; an unpublish takes the bind down.
  void ExpectConverges() {
    faulty_.Clear();
    auto status = publisher_.Publish(spec_);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_NO_FATAL_FAILURE(ExpectBound());
    ASSERT_TRUE(publisher_.Publish(spec_).ok()) << "a retry of a bound view";
    ASSERT_NO_FATAL_FAILURE(ExpectBound());
    status = publisher_.UnmountViews({spec_.volume_id, Target()});
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(fake_.MountCount(Target()), 0);
  }

  FakeHostFs fake_;
  FaultyHostFs faulty_{fake_};
  FakeViewBinder binder_{fake_};
  driver::ViewCatalog views_{
      {driver::View{"flux-core-0.88.0", "sha256:01", kCopy, kCopyId}}, {}};
  driver::VolumeCount count_{driver::VolumeCaps{}};
  driver::ViewPublisher publisher_{
      faulty_,
      binder_,
      views_,
      count_,
      {.api = GetParam(), .staging_dir = "/csi/view-staging"}};
  KubeletPod pod_;
  driver::ViewPublishSpec spec_;
};

TEST_P(ViewPublisherFaultTest, TheTargetDirectoryFailsAsTheCertPathDoes) {
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
    EXPECT_NE(status.error_message().find(Target()), std::string::npos)
        << status.error_message();
    EXPECT_EQ(fake_.Dump(), before) << "a failed publish left something";
    EXPECT_EQ(count_.GetStats().volumes, 0u) << "a failed publish counted";
  }
  ExpectConverges();
}

// The bind itself fails (EPERM: no CAP_SYS_ADMIN; ENOMEM): INTERNAL naming
// the view, and the directory the publish made is gone again.
TEST_P(ViewPublisherFaultTest, AFailedBindLeavesNothing) {
  // Staged: each step made once per copy fails in turn, in the order a
  // publish reaches it.
  const std::vector<BinderOp> steps =
      GetParam() == ViewBindApi::kDetached
          ? std::vector{BinderOp::kBindSealed}
          : std::vector{BinderOp::kMakePrivate, BinderOp::kStageSealed,
                        BinderOp::kFromStaging};
  for (const BinderOp failing : steps) {
    binder_.FailNext(failing, EPERM);
    const grpc::Status status = publisher_.Publish(spec_);
    EXPECT_EQ(status.error_code(), StatusCode::INTERNAL)
        << status.error_message();
    EXPECT_NE(status.error_message().find("binding view flux-core-0.88.0"),
              std::string::npos)
        << status.error_message();
    EXPECT_FALSE(fake_.Exists(Target())) << fake_.Dump();
    EXPECT_EQ(count_.GetStats().volumes, 0u);
  }
  ExpectConverges();
}

// A busy target cannot be unmounted: INTERNAL, the bind stays (kubelet
// retries the unpublish), and the retry takes it down.
TEST_P(ViewPublisherFaultTest, ABusyTargetKeepsItsBindUntilARetry) {
  ASSERT_TRUE(publisher_.Publish(spec_).ok());
  faulty_.Fail(Op::kUnmount, EBUSY, 1);
  const grpc::Status status =
      publisher_.UnmountViews({spec_.volume_id, Target()});
  EXPECT_EQ(status.error_code(), StatusCode::INTERNAL)
      << status.error_message();
  EXPECT_EQ(fake_.MountCount(Target()), 1);
  faulty_.Clear();
  ASSERT_TRUE(publisher_.UnmountViews({spec_.volume_id, Target()}).ok());
  EXPECT_EQ(fake_.MountCount(Target()), 0);
}

// A bind found unsealed is taken down and bound again, sealed; if it cannot
// be taken down (busy), the publish fails rather than answer OK over it.
TEST_P(ViewPublisherFaultTest, AnUnsealedBindIsBoundAgainOrTheRepublishFails) {
  ASSERT_TRUE(publisher_.Publish(spec_).ok());
  binder_.Unseal(Target());
  faulty_.Fail(Op::kUnmount, EBUSY, 1);
  grpc::Status status = publisher_.Publish(spec_);
  EXPECT_EQ(status.error_code(), StatusCode::INTERNAL)
      << status.error_message();
  EXPECT_NE(status.error_message().find("unmounting the unsealed view"),
            std::string::npos)
      << status.error_message();
  faulty_.Clear();
  status = publisher_.Publish(spec_);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ExpectBound();
}

INSTANTIATE_TEST_SUITE_P(BindApis, ViewPublisherFaultTest,
                         ::testing::Values(ViewBindApi::kDetached,
                                           ViewBindApi::kStaged),
                         [](const auto& info) {
                           return info.param == ViewBindApi::kDetached
                                      ? std::string("Detached")
                                      : std::string("Staged");
                         });

}  // namespace
}  // namespace fcc::testing
