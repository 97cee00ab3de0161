// Shared by the real-driver fault, crash and security tests: a scratch root
// on tmpfs with a master key, one real driver process, kubelet-like pods,
// and a classification of what the kernel holds at a target.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "csi_client.h"
#include "curve/cert_file.h"
#include "curve/minicluster_cert.h"
#include "driver_process.h"
#include "mount_env.h"

namespace fcc::testing {

inline bool Exists(const std::string& path) {
  struct stat st{};
  return lstat(path.c_str(), &st) == 0;
}

inline bool HasOption(const std::string& list, const std::string& token) {
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    if (list.compare(start, end - start, token) == 0) return true;
    start = end + 1;
  }
  return false;
}

enum class VolumeState {
  kAbsent,    // no path
  kPlainDir,  // an empty directory, nothing mounted
  kHealthy,   // one read-only driver tmpfs with the exact cert, 0400, owner
  kHalfMade,  // one driver tmpfs, not (yet) complete or read-only
  kBroken,    // anything else: stacked mounts, wrong bytes, foreign mount...
};

inline const char* StateName(VolumeState s) {
  static constexpr const char* kNames[] = {"absent", "plain-dir", "healthy",
                                           "half-made", "broken"};
  return kNames[static_cast<int>(s)];
}

struct VolumeReport {
  VolumeState state;
  std::string why;
};

// Looks at `target` the way a Flux broker and an operator would.
inline VolumeReport InspectVolume(const std::string& target,
                                  const std::string& expected_cert, uid_t uid,
                                  gid_t gid) {
  struct stat st{};
  if (lstat(target.c_str(), &st) != 0) return {VolumeState::kAbsent, ""};
  const auto mounts = MountsUnder(target);
  if (mounts.empty()) {
    if (!S_ISDIR(st.st_mode)) return {VolumeState::kBroken, "not a dir"};
    std::error_code ec;
    if (!std::filesystem::is_empty(target, ec)) {
      return {VolumeState::kBroken, "unmounted dir holds files"};
    }
    return {VolumeState::kPlainDir, ""};
  }
  if (mounts.size() != 1 || mounts[0].mount_point != target) {
    return {VolumeState::kBroken,
            std::to_string(mounts.size()) + " mounts at/below the target"};
  }
  const MountEntry& m = mounts[0];
  if (m.fs_type != "tmpfs" || m.source != "curve.minicluster.dev") {
    return {VolumeState::kBroken, "foreign mount " + m.source};
  }
  for (const char* flag : {"nosuid", "nodev", "noexec"}) {
    if (!HasOption(m.options, flag)) {
      return {VolumeState::kBroken, std::string("missing ") + flag};
    }
  }
  const std::string cert_path = target + "/curve.cert";
  struct stat cst{};
  const bool ro =
      HasOption(m.options, "ro") && HasOption(m.super_options, "ro");
  if (!ro || lstat(cert_path.c_str(), &cst) != 0 ||
      ReadFileOrEmpty(cert_path) != expected_cert) {
    return {VolumeState::kHalfMade, ro ? "cert missing or partial" : "rw"};
  }
  if (!S_ISREG(cst.st_mode) || (cst.st_mode & 07777) != 0400 ||
      cst.st_uid != uid || cst.st_gid != gid) {
    return {VolumeState::kBroken, "cert mode/owner"};
  }
  auto parsed = curve::LoadCertFile(cert_path);
  if (!parsed) return {VolumeState::kBroken, "LoadCertFile: " + parsed.error()};
  return {VolumeState::kHealthy, ""};
}

// One driver serving from a fresh scratch root.
class RealDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FCC_REQUIRE_MOUNT_ENV();
    root_ = std::make_unique<ScratchRoot>();
    master_key_bytes_ = std::string(64, 'k');
    master_key_ = root_->WriteMasterKey("master.key", master_key_bytes_);
    ASSERT_NO_FATAL_FAILURE(StartDriver());
  }

  void TearDown() override {
    // Close our connection first: the server's graceful shutdown otherwise
    // waits ~5 s for an idle client to go away.
    client_.reset();
    if (driver_ && driver_->running()) {
      EXPECT_EQ(driver_->Terminate(), 0) << "the driver did not stop cleanly";
    }
  }

  DriverProcess::Options Options() const {
    DriverProcess::Options o;
    o.socket_path = root_->socket_path("node-a");
    o.node_id = "node-a";
    o.master_key_file = master_key_;
    o.log_path = root_->log_path("node-a");
    o.log_level = "debug";
    o.kubelet_dir = root_->path();  // root_->pods_dir() is <root>/pods
    return o;
  }

  void StartDriver() {
    driver_ = std::make_unique<DriverProcess>(Options());
    ASSERT_TRUE(driver_->Start()) << log();
    client_ = std::make_unique<CsiClient>(driver_->options().socket_path);
    // The mount2 entries run these tests again with MOUNT_API=mount: each
    // start proves the API it claims (and none of the other's lines).
    const MountApiLog api = ExpectedMountApiLog();
    ASSERT_NE(log().find(api.expected), std::string::npos) << log();
    ASSERT_EQ(log().find(api.other), std::string::npos) << log();
  }

  // SIGTERM after closing our connection; the exit code.
  int Stop() {
    client_.reset();
    return driver_->Terminate();
  }

  std::string log() const { return ReadFileOrEmpty(root_->log_path("node-a")); }

  // pod-<i> in `ns`, parent directory made as kubelet would.
  KubeletPod Pod(int i, const std::string& ns = "default",
                 bool prepare = true) const {
    KubeletPod pod;
    pod.pods_dir = root_->pods_dir();
    pod.namespace_name = ns;
    pod.name = "lammps-" + std::to_string(i);
    char uid[64];
    snprintf(uid, sizeof(uid), "6f1c2d3e-0000-4000-8000-%012d", i);
    pod.uid = uid;
    if (prepare) KubeletPrepareParent(pod);
    return pod;
  }

  std::string Cert(const std::string& ns, const std::string& name,
                   const std::string& master = "") const {
    return std::string(
        curve::MakeMiniClusterCert(
            curve::Secret(master.empty() ? master_key_bytes_ : master),
            {ns, name, ""})
            .text.reveal());
  }

  std::unique_ptr<ScratchRoot> root_;
  std::string master_key_bytes_;
  std::string master_key_;
  std::unique_ptr<DriverProcess> driver_;
  std::unique_ptr<CsiClient> client_;
};

}  // namespace fcc::testing
