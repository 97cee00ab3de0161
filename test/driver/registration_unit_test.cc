// The pure parts of self-registration and /healthz: socket naming, what
// GetInfo answers, kubelet's verdicts, Probe results and socket identity.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "driver/health_check.h"
#include "driver/registration_service.h"

namespace fcc::driver {
namespace {

TEST(RegistrationSocketPathTest, FollowsKubeletsDriverRegSockConvention) {
  EXPECT_EQ(RegistrationSocketPath("/registration"),
            "/registration/curve.minicluster.dev-reg.sock");
  EXPECT_EQ(RegistrationSocketPath("/registration/"),
            "/registration/curve.minicluster.dev-reg.sock");
}

TEST(CheckKubeletRegistrationPathTest, WantsAPlainAbsoluteHostPath) {
  EXPECT_TRUE(CheckKubeletRegistrationPath(
      std::string(kDefaultKubeletRegistrationPath)));
  const auto with_scheme = CheckKubeletRegistrationPath(
      "unix:///var/lib/kubelet/plugins/curve.minicluster.dev/csi.sock");
  ASSERT_FALSE(with_scheme);
  EXPECT_NE(with_scheme.error().find("--kubelet-registration-path"),
            std::string::npos);
  EXPECT_FALSE(CheckKubeletRegistrationPath(""));
  EXPECT_FALSE(CheckKubeletRegistrationPath("plugins/csi.sock"));
  EXPECT_FALSE(CheckKubeletRegistrationPath("/" + std::string(120, 'a')));
}

TEST(MakePluginInfoTest, AnswersWhatKubeletsCsiHandlerAccepts) {
  const auto info = MakePluginInfo("/var/lib/kubelet/plugins/x/csi.sock");
  EXPECT_EQ(info.type(), "CSIPlugin");
  EXPECT_EQ(info.name(), "curve.minicluster.dev");
  EXPECT_EQ(info.endpoint(), "/var/lib/kubelet/plugins/x/csi.sock");
  ASSERT_EQ(info.supported_versions_size(), 1);
  EXPECT_EQ(info.supported_versions(0), "1.0.0");
}

TEST(RegistrationStateTest, RemembersTheLatestVerdict) {
  RegistrationState state;
  EXPECT_FALSE(state.Failure());
  state.Record(false, "boom");
  EXPECT_EQ(state.Failure(), "boom");
  state.Record(false, "");
  ASSERT_TRUE(state.Failure());
  EXPECT_FALSE(state.Failure()->empty());
  state.Record(true, "");
  EXPECT_FALSE(state.Failure());
}

// The handlers, called as the Registration service calls them.
TEST(RegistrationHandlersTest, AnswerThePluginInfoAndRecordKubeletsVerdict) {
  const auto info = MakePluginInfo("/var/lib/kubelet/plugins/x/csi.sock");
  EXPECT_EQ(HandleGetInfo(info).SerializeAsString(), info.SerializeAsString());
  RegistrationState state;
  pluginregistration::RegistrationStatus refused;
  refused.set_plugin_registered(false);
  refused.set_error("version 1.0.0 not supported");
  HandleNotifyRegistrationStatus(refused, info, state);
  EXPECT_EQ(state.Failure(), "version 1.0.0 not supported");
  pluginregistration::RegistrationStatus registered;
  registered.set_plugin_registered(true);
  HandleNotifyRegistrationStatus(registered, info, state);
  EXPECT_FALSE(state.Failure());
}

TEST(ProbeVerdictTest, ReadyUnlessFailedOrExplicitlyNotReady) {
  csi::v1::ProbeResponse unset;
  EXPECT_TRUE(ProbeVerdict(grpc::Status::OK, unset));
  csi::v1::ProbeResponse ready;
  ready.mutable_ready()->set_value(true);
  EXPECT_TRUE(ProbeVerdict(grpc::Status::OK, ready));
  csi::v1::ProbeResponse not_ready;
  not_ready.mutable_ready()->set_value(false);
  EXPECT_FALSE(ProbeVerdict(grpc::Status::OK, not_ready));
  const auto failed = ProbeVerdict(
      grpc::Status(grpc::DEADLINE_EXCEEDED, "Deadline Exceeded"), ready);
  ASSERT_FALSE(failed);
  EXPECT_NE(failed.error().find("Deadline Exceeded"), std::string::npos);
}

class SocketIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/fcc-socket-identity-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/s.sock";
  }
  void TearDown() override {
    for (int fd : fds_) close(fd);
    std::filesystem::remove_all(dir_);
  }
  void Bind() {
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    fds_.push_back(fd);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, path_.c_str());
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
        << std::strerror(errno);
  }
  std::string dir_, path_;
  std::vector<int> fds_;
};

TEST_F(SocketIdentityTest, FailsOnceTheSocketIsUnlinkedOrReplaced) {
  ASSERT_NO_FATAL_FAILURE(Bind());
  const auto id = IdentifySocket(path_);
  ASSERT_TRUE(id) << id.error();
  EXPECT_TRUE(CheckSocketIdentity(path_, *id));

  ASSERT_EQ(unlink(path_.c_str()), 0);
  const auto gone = CheckSocketIdentity(path_, *id);
  ASSERT_FALSE(gone);
  EXPECT_NE(gone.error().find("gone"), std::string::npos);

  ASSERT_NO_FATAL_FAILURE(Bind());  // another socket at the same path
  const auto replaced = CheckSocketIdentity(path_, *id);
  ASSERT_FALSE(replaced);
  EXPECT_NE(replaced.error().find("replaced"), std::string::npos);
}

TEST_F(SocketIdentityTest, AFileIsNotASocket) {
  std::ofstream(path_) << "x";
  EXPECT_FALSE(IdentifySocket(path_));
}

}  // namespace
}  // namespace fcc::driver
