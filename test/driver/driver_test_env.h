// Shared by the driver end-to-end tests: a scratch root with a master key,
// one real driver process serving on a unix socket, a kubelet-like client,
// and small helpers to look at what the kernel really holds.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "csi_client.h"
#include "driver_process.h"
#include "mount_env.h"

namespace fcc::testing {

// The exit code of a driver that refuses to start (docs/admin/errors.md, "What
// each error means"). Pinned: an ASan abort (134) or a hang (RunToExit's -1)
// is no refusal.
inline constexpr int kRefusedToStart = 2;

// The driver's log shows the mount API this pass claims to test, and never
// the other (see ExpectedMountApiLog).
inline void ExpectMountApiAsAsked(const std::string& log_text) {
  const MountApiLog api = ExpectedMountApiLog();
  ASSERT_NE(log_text.find(api.expected), std::string::npos) << log_text;
  ASSERT_EQ(log_text.find(api.other), std::string::npos) << log_text;
}

inline DriverProcess::Options NodeOptions(const ScratchRoot& root,
                                          const std::string& node,
                                          const std::string& master_key_file) {
  DriverProcess::Options options;
  options.socket_path = root.socket_path(node);
  options.node_id = node;
  options.master_key_file = master_key_file;
  options.log_path = root.log_path(node);
  options.kubelet_dir = root.path();  // root.pods_dir() is <root>/pods
  return options;
}

// "a,b,c" → {"a","b","c"}: mount options compared as whole tokens.
inline std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(item);
  return out;
}

inline bool HasToken(const std::string& comma_list, const std::string& token) {
  for (const auto& t : SplitCommas(comma_list)) {
    if (t == token) return true;
  }
  return false;
}

inline bool PathExists(const std::string& path) {
  struct stat st{};
  return lstat(path.c_str(), &st) == 0;
}

// Root can neither add a file under `target` nor truncate, chmod or unlink
// its curve.cert: each fails with EROFS.
inline void ExpectUnwritableEvenForRoot(const std::string& target) {
  const std::string cert = target + "/curve.cert";
  errno = 0;
  int fd = open((target + "/intruder").c_str(), O_WRONLY | O_CREAT, 0600);
  EXPECT_EQ(fd, -1);
  EXPECT_EQ(errno, EROFS) << strerror(errno);
  if (fd >= 0) close(fd);
  errno = 0;
  fd = open(cert.c_str(), O_WRONLY | O_TRUNC);
  EXPECT_EQ(fd, -1);
  EXPECT_EQ(errno, EROFS) << strerror(errno);
  if (fd >= 0) close(fd);
  errno = 0;
  EXPECT_EQ(chmod(cert.c_str(), 0644), -1);
  EXPECT_EQ(errno, EROFS) << strerror(errno);
  errno = 0;
  EXPECT_EQ(unlink(cert.c_str()), -1);
  EXPECT_EQ(errno, EROFS) << strerror(errno);
}

// A loopback port nothing listens on right now (for --metrics-address).
inline int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// A driver ("node-a") serving from a fresh scratch root, and a pod whose
// target parent exists as kubelet would have made it.
class DriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FCC_REQUIRE_MOUNT_ENV();
    root_ = std::make_unique<ScratchRoot>();
    master_key_bytes_ = MasterKeyBytes();
    master_key_ = root_->WriteMasterKey("master.key", master_key_bytes_);
    ASSERT_NO_FATAL_FAILURE(StartDriver());
    pod_.pods_dir = root_->pods_dir();
    KubeletPrepareParent(pod_);
  }

  void TearDown() override {
    client_.reset();
    if (driver_ && driver_->running()) {
      EXPECT_EQ(driver_->Terminate(), 0) << "the driver did not stop cleanly";
    }
  }

  virtual std::string MasterKeyBytes() const { return std::string(64, 'k'); }
  virtual DriverProcess::Options DriverOptions() const {
    return NodeOptions(*root_, "node-a", master_key_);
  }

  // (Re)starts the driver on the same socket; asserts it becomes ready.
  void StartDriver() {
    driver_ = std::make_unique<DriverProcess>(DriverOptions());
    ASSERT_TRUE(driver_->Start()) << log();
    client_ = std::make_unique<CsiClient>(driver_->options().socket_path);
    ASSERT_NO_FATAL_FAILURE(ExpectMountApiAsAsked(log()));
  }

  std::string log() const {
    return ReadFileOrEmpty(driver_ ? driver_->options().log_path
                                   : root_->log_path("node-a"));
  }
  std::string socket_path() const { return driver_->options().socket_path; }

  std::unique_ptr<ScratchRoot> root_;
  std::string master_key_bytes_;
  std::string master_key_;
  std::unique_ptr<DriverProcess> driver_;
  std::unique_ptr<CsiClient> client_;
  KubeletPod pod_;
};

}  // namespace fcc::testing
