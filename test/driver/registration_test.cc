// Self-registration with kubelet's plugin watcher and the /healthz that the
// DaemonSet's liveness probe reads, against the real driver over its real
// sockets: a kubelet-like client on <registration-dir>/<driver>-reg.sock.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>
#include <utility>

#include "http_driver_test.h"
#include "pluginregistration.grpc.pb.h"

namespace fcc::testing {
namespace {

constexpr char kKubeletPath[] =
    "/var/lib/kubelet/plugins/curve.minicluster.dev/csi.sock";

// What kubelet's plugin manager does on the registration socket.
class KubeletRegistrationClient {
 public:
  explicit KubeletRegistrationClient(const std::string& socket_path)
      : stub_(pluginregistration::Registration::NewStub(grpc::CreateChannel(
            "unix://" + socket_path, grpc::InsecureChannelCredentials()))) {}

  grpc::Status GetInfo(pluginregistration::PluginInfo* info) {
    grpc::ClientContext context;
    // kubelet gives GetInfo one second.
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(1));
    context.set_wait_for_ready(true);
    return stub_->GetInfo(&context, {}, info);
  }

  grpc::Status Notify(bool registered, const std::string& error) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    pluginregistration::RegistrationStatus status;
    status.set_plugin_registered(registered);
    status.set_error(error);
    pluginregistration::RegistrationStatusResponse response;
    return stub_->NotifyRegistrationStatus(&context, status, &response);
  }

 private:
  std::unique_ptr<pluginregistration::Registration::Stub> stub_;
};

// A driver registering itself through <scratch>/registry, with /healthz.
class RegistrationTest : public HttpDriverTest {
 protected:
  DriverProcess::Options DriverOptions() const override {
    auto options = HttpDriverTest::DriverOptions();
    options.extra_args.push_back("--registration-dir=" + registry_dir());
    options.extra_args.push_back(std::string("--kubelet-registration-path=") +
                                 kKubeletPath);
    return options;
  }

  std::string registry_dir() const { return root_->path() + "/registry"; }
  std::string reg_socket() const {
    return registry_dir() + "/curve.minicluster.dev-reg.sock";
  }

  // GET /healthz: the status, and the body in `body`.
  int Healthz(std::string* body = nullptr) {
    int status = -1;
    std::string text = Get("/healthz", &status);
    if (body) *body = std::move(text);
    return status;
  }
};

TEST_F(RegistrationTest, GetInfoTellsKubeletWhereTheCsiSocketIs) {
  struct stat st{};
  ASSERT_EQ(lstat(reg_socket().c_str(), &st), 0) << log();
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);

  KubeletRegistrationClient kubelet(reg_socket());
  pluginregistration::PluginInfo info;
  const auto status = kubelet.GetInfo(&info);
  ASSERT_TRUE(status.ok()) << status.error_message() << "\n" << log();
  EXPECT_EQ(info.type(), "CSIPlugin");
  EXPECT_EQ(info.name(), "curve.minicluster.dev");
  EXPECT_EQ(info.endpoint(), kKubeletPath);
  ASSERT_EQ(info.supported_versions_size(), 1);
  EXPECT_EQ(info.supported_versions(0), "1.0.0");
}

TEST_F(RegistrationTest, RefusedRegistrationFailsHealthUntilRegistered) {
  ASSERT_GT(port_, 0);
  std::string body;
  EXPECT_EQ(Healthz(&body), 200) << body;
  EXPECT_EQ(body, "ok\n");

  KubeletRegistrationClient kubelet(reg_socket());
  ASSERT_TRUE(kubelet.Notify(false, "boom").ok()) << log();
  EXPECT_EQ(Healthz(&body), 503);
  EXPECT_NE(body.find("kubelet refused registration: boom"), std::string::npos)
      << body;
  EXPECT_NE(log().find("kubelet refused to register curve.minicluster.dev: "
                       "boom"),
            std::string::npos)
      << log();

  ASSERT_TRUE(kubelet.Notify(true, "").ok());
  EXPECT_EQ(Healthz(&body), 200) << body;
  EXPECT_NE(log().find("kubelet registered curve.minicluster.dev"),
            std::string::npos);
}

// kubelet dials the CSI socket anew for every call: once its file is gone
// the driver is unreachable, though the process and listener are fine.
TEST_F(RegistrationTest, HealthFailsWhenTheCsiSocketIsUnlinked) {
  ASSERT_GT(port_, 0);
  EXPECT_EQ(Healthz(), 200);
  ASSERT_EQ(unlink(socket_path().c_str()), 0);
  std::string body;
  EXPECT_EQ(Healthz(&body), 503);
  EXPECT_NE(body.find("CSI socket " + socket_path() + " is gone"),
            std::string::npos)
      << body;
  // The transition is logged once, not every probe at info.
  EXPECT_EQ(Healthz(), 503);
  const std::string text = log();
  const size_t first = text.find(" warning unhealthy: CSI socket");
  ASSERT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find(" warning unhealthy", first + 1), std::string::npos)
      << text;
}

TEST_F(RegistrationTest, HealthFailsWhenTheRegistrationSocketIsRemoved) {
  ASSERT_GT(port_, 0);
  EXPECT_EQ(Healthz(), 200);
  ASSERT_EQ(unlink(reg_socket().c_str()), 0);
  std::string body;
  EXPECT_EQ(Healthz(&body), 503);
  EXPECT_NE(body.find("registration socket " + reg_socket() + " is gone"),
            std::string::npos)
      << body;
}

// Names of the files deleted in the watched directories, in order (as
// kubelet's plugin watcher sees them through inotify).
class DeleteWatch {
 public:
  explicit DeleteWatch(const std::vector<std::string>& dirs)
      : fd_(inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) {
    for (const auto& dir : dirs) inotify_add_watch(fd_, dir.c_str(), IN_DELETE);
  }
  ~DeleteWatch() { close(fd_); }
  std::vector<std::string> Deleted() {
    std::vector<std::string> names;
    alignas(inotify_event) char buffer[4096];
    ssize_t n;
    while ((n = read(fd_, buffer, sizeof(buffer))) > 0) {
      for (char* p = buffer; p < buffer + n;) {
        const auto* event = reinterpret_cast<const inotify_event*>(p);
        if (event->len > 0) names.emplace_back(event->name);
        p += sizeof(inotify_event) + event->len;
      }
    }
    return names;
  }

 private:
  int fd_;
};

TEST_F(RegistrationTest, SigtermRemovesTheRegistrationSocketFirst) {
  ASSERT_TRUE(PathExists(reg_socket()));
  ASSERT_EQ(Healthz(), 200);  // the driver's probe channel is connected
  DeleteWatch watch(
      {registry_dir(),
       std::filesystem::path(socket_path()).parent_path().string()});
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(driver_->Terminate(std::chrono::seconds(10)), 0) << log();
  // The driver's own health channel must not hold up the graceful stop.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_FALSE(PathExists(reg_socket()));
  EXPECT_FALSE(PathExists(socket_path()));
  // kubelet unregisters the driver before its CSI socket goes away.
  EXPECT_EQ(
      watch.Deleted(),
      (std::vector<std::string>{"curve.minicluster.dev-reg.sock", "csi.sock"}));
  EXPECT_NE(log().find("removed registration socket " + reg_socket()),
            std::string::npos);
}

// A registration socket left by a killed driver is replaced; a live one
// (another driver on this node) is refused.
TEST_F(RegistrationTest, StaleSocketIsReplacedLiveOneRefused) {
  auto other_options = NodeOptions(*root_, "node-b", master_key_);
  other_options.extra_args = {"--registration-dir=" + registry_dir()};
  DriverProcess other(other_options);
  EXPECT_EQ(other.RunToExit(), 2);
  EXPECT_NE(ReadFileOrEmpty(other_options.log_path)
                .find("another process is serving on " + reg_socket()),
            std::string::npos)
      << ReadFileOrEmpty(other_options.log_path);

  driver_->Kill9();
  ASSERT_TRUE(PathExists(reg_socket()));  // stale
  ASSERT_NO_FATAL_FAILURE(StartDriver());
  KubeletRegistrationClient kubelet(reg_socket());
  pluginregistration::PluginInfo info;
  const auto status = kubelet.GetInfo(&info);
  ASSERT_TRUE(status.ok()) << status.error_message() << "\n" << log();
  EXPECT_EQ(info.name(), "curve.minicluster.dev");
  EXPECT_NE(log().find("removed stale socket " + reg_socket()),
            std::string::npos);
}

// Without --registration-dir (the default) nothing is registered: no
// socket anywhere, and /healthz is the CSI socket's health alone.
using NoRegistrationTest = HttpDriverTest;

TEST_F(NoRegistrationTest, ServesNoRegistrationSocket) {
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(root_->path())) {
    EXPECT_EQ(entry.path().string().find("-reg.sock"), std::string::npos)
        << entry.path();
  }
  int status = -1;
  const std::string body = Get("/healthz", &status);
  EXPECT_EQ(status, 200) << body;
  EXPECT_EQ(log().find("registration socket"), std::string::npos) << log();
}

// REGISTRATION_DIR and KUBELET_REGISTRATION_PATH come from the environment
// as the DaemonSet sets them.
class RegistrationEnvTest : public DriverTest {
 protected:
  void SetUp() override {
    setenv("KUBELET_REGISTRATION_PATH", "/var/lib/kubelet/plugins/env/c.sock",
           1);
    DriverTest::SetUp();
  }
  void TearDown() override {
    DriverTest::TearDown();
    unsetenv("REGISTRATION_DIR");
    unsetenv("KUBELET_REGISTRATION_PATH");
  }
  DriverProcess::Options DriverOptions() const override {
    setenv("REGISTRATION_DIR", (root_->path() + "/env-registry").c_str(), 1);
    return DriverTest::DriverOptions();
  }
};

TEST_F(RegistrationEnvTest, TakesItsSettingsFromTheEnvironment) {
  KubeletRegistrationClient kubelet(root_->path() +
                                    "/env-registry/curve.minicluster.dev-"
                                    "reg.sock");
  pluginregistration::PluginInfo info;
  const auto status = kubelet.GetInfo(&info);
  ASSERT_TRUE(status.ok()) << status.error_message() << "\n" << log();
  EXPECT_EQ(info.endpoint(), "/var/lib/kubelet/plugins/env/c.sock");
}

TEST(RegistrationFlagsTest, RefusesAKubeletPathKubeletCannotDial) {
  FCC_REQUIRE_MOUNT_ENV();
  ScratchRoot root;
  const std::string key =
      root.WriteMasterKey("master.key", std::string(64, 'k'));
  auto options = NodeOptions(root, "node-a", key);
  options.extra_args = {
      "--registration-dir=" + root.path() + "/registry",
      "--kubelet-registration-path=unix://" + std::string(kKubeletPath)};
  DriverProcess driver(options);
  EXPECT_EQ(driver.RunToExit(), 2);
  const std::string text = ReadFileOrEmpty(options.log_path);
  EXPECT_NE(text.find("--kubelet-registration-path must be a plain path"),
            std::string::npos)
      << text;
  EXPECT_FALSE(PathExists(options.socket_path));
}

// CLI11 hands an empty "--registration-dir=" the next argument: refused
// rather than registering in a directory named after a flag.
TEST(RegistrationFlagsTest, RefusesAnEmptyRegistrationDirThatAteAFlag) {
  FCC_REQUIRE_MOUNT_ENV();
  ScratchRoot root;
  const std::string key =
      root.WriteMasterKey("master.key", std::string(64, 'k'));
  auto options = NodeOptions(root, "node-a", key);
  options.extra_args = {"--registration-dir=", "--metrics-address=127.0.0.1:0"};
  DriverProcess driver(options);
  EXPECT_EQ(driver.RunToExit(), 2);
  const std::string text = ReadFileOrEmpty(options.log_path);
  EXPECT_NE(text.find("was --registration-dir given an empty value"),
            std::string::npos)
      << text;
  EXPECT_FALSE(PathExists(options.socket_path));
}

}  // namespace
}  // namespace fcc::testing
