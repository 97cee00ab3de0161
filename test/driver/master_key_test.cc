// The driver refuses to serve without a usable master key (or node ID), at
// once, and says how to create the Secret; it accepts owner-only keys.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <functional>

#include "driver_process.h"
#include "driver_test_env.h"
#include "mount_env.h"

namespace fcc::testing {
namespace {

constexpr char kCreateSecretHint[] =
    "kubectl -n flux-curve-csi create secret generic";
// Start-up refusals must be quick; a hang shows as RunToExit's -1.
constexpr auto kRefusalTimeout = std::chrono::seconds(5);

const std::string kGoodKey = "0123456789abcdef0123456789abcdef-master-key";

struct KeyCase {
  const char* name;
  // Makes the key file under `root` and returns the --master-key-file value.
  std::function<std::string(const ScratchRoot& root)> make;
};

void PrintTo(const KeyCase& c, std::ostream* os) { *os << c.name; }

class MasterKeyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FCC_REQUIRE_MOUNT_ENV();  // root, and a tmpfs scratch root for keys
    root_ = std::make_unique<ScratchRoot>();
  }
  DriverProcess::Options Options(const std::string& key_file) const {
    auto options = NodeOptions(*root_, "node-a", key_file);
    // Something after --master-key-file, as in the DaemonSet: an empty
    // "--master-key-file=" must not quietly take it as its value.
    options.extra_args = {"--volume-size-bytes=16384"};
    return options;
  }
  std::unique_ptr<ScratchRoot> root_;
};

class RefusedKeyTest : public MasterKeyTest,
                       public ::testing::WithParamInterface<KeyCase> {};

TEST_P(RefusedKeyTest, RefusesToServeAndSaysHowToCreateTheSecret) {
  const auto options = Options(GetParam().make(*root_));
  DriverProcess driver(options);
  const auto start = std::chrono::steady_clock::now();
  const int rc = driver.RunToExit(kRefusalTimeout);
  const std::string log = ReadFileOrEmpty(options.log_path);
  EXPECT_EQ(rc, kRefusedToStart) << "rc " << rc << " (-1: still running after "
                                 << kRefusalTimeout.count() << " s)\n"
                                 << log;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_NE(log.find(kCreateSecretHint), std::string::npos) << log;
  EXPECT_NE(log.find("refusing to serve"), std::string::npos) << log;
  EXPECT_FALSE(PathExists(options.socket_path))
      << "a refusing driver must not listen";
  // A refusal names the problem, never the key.
  EXPECT_EQ(log.find(kGoodKey.substr(0, 16)), std::string::npos) << log;
}

INSTANTIATE_TEST_SUITE_P(
    Keys, RefusedKeyTest,
    ::testing::Values(
        KeyCase{"Missing",
                [](const ScratchRoot& r) { return r.path() + "/absent.key"; }},
        KeyCase{"Empty",
                [](const ScratchRoot& r) {
                  return r.WriteMasterKey("k", "", 0400);
                }},
        KeyCase{"ShorterThan32Bytes",
                [](const ScratchRoot& r) {
                  return r.WriteMasterKey("k", kGoodKey.substr(0, 31), 0400);
                }},
        KeyCase{"GroupReadable0640",
                [](const ScratchRoot& r) {
                  return r.WriteMasterKey("k", kGoodKey, 0640);
                }},
        KeyCase{"OtherReadable0604",
                [](const ScratchRoot& r) {
                  return r.WriteMasterKey("k", kGoodKey, 0604);
                }},
        KeyCase{"WorldReadable0644",
                [](const ScratchRoot& r) {
                  return r.WriteMasterKey("k", kGoodKey, 0644);
                }},
        KeyCase{"GroupWritable0620",
                [](const ScratchRoot& r) {
                  return r.WriteMasterKey("k", kGoodKey, 0620);
                }},
        KeyCase{"ADirectory",
                [](const ScratchRoot& r) {
                  const std::string dir = r.path() + "/key-dir";
                  std::filesystem::create_directory(dir);
                  chmod(dir.c_str(), 0700);
                  return dir;
                }},
        KeyCase{"AFifo",  // open(2) of a FIFO blocks until a writer comes
                [](const ScratchRoot& r) {
                  const std::string fifo = r.path() + "/key-fifo";
                  mkfifo(fifo.c_str(), 0600);
                  return fifo;
                }},
        KeyCase{"EmptyFlagBeforeAnother",  // --master-key-file= --x=..
                [](const ScratchRoot&) { return std::string(); }}),
    [](const auto& info) { return std::string(info.param.name); });

class AcceptedKeyTest : public MasterKeyTest,
                        public ::testing::WithParamInterface<KeyCase> {};

TEST_P(AcceptedKeyTest, Serves) {
  const auto options = Options(GetParam().make(*root_));
  DriverProcess driver(options);
  ASSERT_TRUE(driver.Start()) << ReadFileOrEmpty(options.log_path);
  struct stat st{};
  EXPECT_EQ(lstat(options.socket_path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(driver.Terminate(std::chrono::seconds(10)), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Keys, AcceptedKeyTest,
    ::testing::Values(
        KeyCase{"Mode0400",
                [](const ScratchRoot& r) {
                  return r.WriteMasterKey("k", kGoodKey, 0400);
                }},
        KeyCase{"Mode0600",
                [](const ScratchRoot& r) {
                  return r.WriteMasterKey("k", kGoodKey, 0600);
                }},
        KeyCase{"Exactly32Bytes",
                [](const ScratchRoot& r) {
                  return r.WriteMasterKey("k", kGoodKey.substr(0, 32), 0400);
                }},
        // A Secret volume: <dir>/master.key -> ..data/master.key, defaultMode
        // 0400 on the file the links lead to.
        KeyCase{"SecretVolumeSymlinks",
                [](const ScratchRoot& r) {
                  namespace fs = std::filesystem;
                  const fs::path dir = r.path() + "/secret";
                  fs::create_directories(dir / "..2026_01_01");
                  const std::string real = r.WriteMasterKey(
                      "secret/..2026_01_01/master.key", kGoodKey, 0400);
                  fs::create_directory_symlink("..2026_01_01", dir / "..data");
                  fs::create_symlink("..data/master.key", dir / "master.key");
                  return (dir / "master.key").string();
                }}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(MasterKeyTest, EmptyNodeIdRefuses) {
  auto options = Options(root_->WriteMasterKey("k", kGoodKey, 0400));
  options.node_id = "";  // --node-id=
  DriverProcess driver(options);
  const int rc = driver.RunToExit(kRefusalTimeout);
  const std::string log = ReadFileOrEmpty(options.log_path);
  EXPECT_EQ(rc, kRefusedToStart) << "rc " << rc << "\n" << log;
  EXPECT_NE(log.find("--node-id"), std::string::npos) << log;
  EXPECT_FALSE(PathExists(options.socket_path));
}

// --selinux-mount-context is for SELinux nodes: a malformed label, or a
// kernel whose tmpfs takes no context= (SELinux off, as here), refuses at
// once rather than serving volumes the runtime would then fail to relabel.
TEST_F(MasterKeyTest, SelinuxContextTheKernelRefusesRefuses) {
  if (PathExists("/sys/fs/selinux/enforce")) {
    GTEST_SKIP() << "SELinux is on: the kernel may take the label";
  }
  for (const char* label :
       {"system_u:object_r:container_file_t:s0", "not-a-label"}) {
    SCOPED_TRACE(label);
    auto options = Options(root_->WriteMasterKey("k", kGoodKey, 0400));
    options.extra_args.push_back(std::string("--selinux-mount-context=") +
                                 label);
    DriverProcess driver(options);
    const int rc = driver.RunToExit(kRefusalTimeout);
    const std::string log = ReadFileOrEmpty(options.log_path);
    EXPECT_EQ(rc, kRefusedToStart) << "rc " << rc << "\n" << log;
    EXPECT_NE(log.find("refusing to serve: --selinux-mount-context"),
              std::string::npos)
        << log;
    EXPECT_FALSE(PathExists(options.socket_path));
  }
}

}  // namespace
}  // namespace fcc::testing
