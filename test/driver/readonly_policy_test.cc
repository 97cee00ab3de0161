// --accept-readonly-false: a request kubelet sends for a pod spec without
// volumes[].csi.readOnly (flux-operator v1alpha2 builds them so) is served,
// and the volume is exactly as read-only as any other.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "curve/cert_file.h"
#include "driver_test_env.h"

namespace fcc::testing {
namespace {

class AcceptReadonlyFalseTest : public DriverTest {
 protected:
  DriverProcess::Options DriverOptions() const override {
    auto options = NodeOptions(*root_, "node-a", master_key_);
    options.extra_args.push_back("--accept-readonly-false");
    return options;
  }
};

TEST_F(AcceptReadonlyFalseTest, PublishesReadOnlyAnyway) {
  auto request = KubeletPublishRequest(pod_, {{"minicluster", "lammps"}});
  request.set_readonly(false);
  const std::string target = KubeletTargetPath(pod_);

  const auto status = client_->Publish(request);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(MountCountAt(target), 1);
  const auto mounts = MountsUnder(target);
  EXPECT_TRUE(HasToken(mounts[0].options, "ro")) << mounts[0].options;
  EXPECT_TRUE(HasToken(mounts[0].super_options, "ro"))
      << mounts[0].super_options;
  const int fd = open((target + "/new").c_str(), O_WRONLY | O_CREAT, 0600);
  EXPECT_EQ(fd, -1);
  EXPECT_EQ(errno, EROFS);
  if (fd >= 0) close(fd);
  EXPECT_TRUE(curve::LoadCertFile(target + "/curve.cert"));

  ASSERT_TRUE(client_->Unpublish(request.volume_id(), target).ok());
  EXPECT_EQ(MountCountAt(target), 0);
}

// Without the flag the same request is refused, and the message names the
// flag as the way out.
TEST_F(DriverTest, RefusesReadonlyFalseByDefaultAndNamesTheFlag) {
  auto request = KubeletPublishRequest(pod_, {{"minicluster", "lammps"}});
  request.set_readonly(false);
  const auto status = client_->Publish(request);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("--accept-readonly-false"),
            std::string::npos)
      << status.error_message();
  EXPECT_FALSE(PathExists(KubeletTargetPath(pod_)));
}

}  // namespace
}  // namespace fcc::testing
