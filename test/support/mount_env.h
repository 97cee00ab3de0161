// The test environment for real mounts: root, a private mount namespace
// (so nothing touches the host's mount table), and a tmpfs scratch root so
// keys never reach a disk.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace fcc::testing {

// Empty if tests may mount here; otherwise why not. Tests call
// FCC_REQUIRE_MOUNT_ENV() which skips, or fails when FCC_REQUIRE_MOUNT_TESTS=1
// (the test runner sets it, so CI cannot silently skip them).
std::string MountEnvProblem();

#define FCC_REQUIRE_MOUNT_ENV()                                        \
  do {                                                                 \
    const std::string fcc_problem = ::fcc::testing::MountEnvProblem(); \
    if (!fcc_problem.empty()) {                                        \
      if (getenv("FCC_REQUIRE_MOUNT_TESTS") != nullptr) {              \
        FAIL() << fcc_problem;                                         \
      }                                                                \
      GTEST_SKIP() << fcc_problem;                                     \
    }                                                                  \
  } while (0)

// A scratch directory on its own tmpfs, unmounted and removed on
// destruction, with a master key file (0600) and a pods dir inside.
class ScratchRoot {
 public:
  ScratchRoot();
  ~ScratchRoot();
  ScratchRoot(const ScratchRoot&) = delete;
  ScratchRoot& operator=(const ScratchRoot&) = delete;

  const std::string& path() const { return path_; }
  std::string pods_dir() const { return path_ + "/pods"; }
  // Writes `bytes` as a master key file with `mode`; returns its path.
  std::string WriteMasterKey(const std::string& name, const std::string& bytes,
                             unsigned mode = 0600) const;
  std::string socket_path(const std::string& node) const {
    return path_ + "/plugins/" + node + "/csi.sock";
  }
  std::string log_path(const std::string& node) const {
    return path_ + "/logs/" + node + ".log";
  }

 private:
  std::string path_;
};

struct MountEntry {
  std::string mount_point;
  std::string fs_type;
  std::string source;
  std::string options;        // per-mount options (ro,nosuid,...)
  std::string super_options;  // superblock options (size=..,mode=..)
};

// Mounts from /proc/self/mountinfo (or another process's, as `mountinfo`)
// whose mount point is `prefix` or below.
std::vector<MountEntry> MountsUnder(
    const std::string& prefix,
    const std::string& mountinfo = "/proc/self/mountinfo");
// How many mounts are stacked exactly at `path`.
int MountCountAt(const std::string& path);
// Another mount namespace that receives what propagates from this one, as
// kubelet's receives the driver's binds under the (shared) pods directory: a
// child that unshared its mounts (shared mounts stay peers) and waits until
// destroyed. Make the mounts to watch shared before creating it.
class PeerMountNamespace {
 public:
  PeerMountNamespace();  // pid() <= 0 if the child could not be made
  ~PeerMountNamespace();
  PeerMountNamespace(const PeerMountNamespace&) = delete;
  PeerMountNamespace& operator=(const PeerMountNamespace&) = delete;

  pid_t pid() const { return pid_; }
  // Its mounts at `prefix` or below.
  std::vector<MountEntry> MountsUnder(const std::string& prefix) const;
  // `path` as the namespace sees it (through /proc/<pid>/root).
  std::string Path(const std::string& path) const;

 private:
  pid_t pid_ = -1;
};

// Whether the running kernel is at least major.minor (uname's release).
bool KernelAtLeast(int major, int minor);

}  // namespace fcc::testing
