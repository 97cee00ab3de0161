// The kernel operations publishing needs, behind one narrow interface so the
// publish logic can be tested with injected faults and without root.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <expected>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "curve/secret.h"

namespace fcc::driver {

// What is at a path, looked at without following a symlink.
enum class PathKind {
  kMissing,
  kDirectory,  // a plain directory, not the root of a mount
  kMountRoot,  // the root directory of a mount
  kSymlink,
  kOther,       // a file, socket, device, ...
  kUnreadable,  // stat failed other than ENOENT: e.g. a broken mount (ENOTCONN)
};

struct FileSnapshot {
  curve::Secret content;
  mode_t mode = 0;  // permission bits only
  uid_t uid = 0;
  gid_t gid = 0;
  bool regular = false;
};

struct FsInfo {
  bool is_tmpfs = false;
  bool read_only = false;
  uint64_t max_inodes = 0;  // f_files: a tmpfs's nr_inodes (0: unlimited)
};

// The tmpfs parameters of a new volume. Read-only is not one of them: the
// tmpfs is made writable, filled, then sealed (PendingMount::MakeReadOnly).
struct TmpfsSpec {
  uint64_t size_bytes = 0;  // tmpfs reads 0 as unlimited
  uint64_t nr_inodes = 0;   // likewise
  mode_t mode = 0;          // of the root directory
  uid_t uid = 0;            // owner of the root directory
  gid_t gid = 0;
  // Keeps the pages out of swap (Linux 6.4+), so keys never reach disk.
  bool noswap = false;
  // SELinux label of every file ("context=" mount option), for nodes where
  // the runtime would otherwise relabel the read-only volume and fail.
  std::string selinux_context;
};

// The spec as tmpfs parameters, in the order the kernel is given them:
// ("size", "16384"), ("nr_inodes", "8"), ("mode", "0500"), ...; an empty
// value is a flag ("noswap").
std::vector<std::pair<std::string, std::string>> TmpfsParameters(
    const TmpfsSpec& spec);
// The same as mount(2) data: "size=16384,nr_inodes=8,mode=0500,...", with
// a value holding a comma in double quotes (an SELinux level "s0:c1,c2").
std::string TmpfsMountData(const TmpfsSpec& spec);

// Whether this kernel's tmpfs takes the parameter (fsopen/fsconfig, without
// mounting anything); an error where it does not, or has no fsopen.
std::error_code ProbeTmpfsParameter(const std::string& key,
                                    const std::string& value);

// A tmpfs not yet attached to any path. Publishing fills and seals it first
// and attaches it last. Each HostFs makes its own kind and is the only one
// that knows what it holds.
class PendingMount {
 public:
  virtual ~PendingMount() = default;

  // Creates a new file `name` in the tmpfs's root (O_EXCL, never through a
  // symlink) with `content`, then sets owner and mode.
  virtual std::error_code WriteNewFile(const std::string& name,
                                       std::string_view content, mode_t mode,
                                       uid_t uid, gid_t gid) = 0;
  // Makes the tmpfs read-only: the superblock (so no bind of it can write
  // either) and the mount.
  virtual std::error_code MakeReadOnly() = 0;
  // Attaches the tmpfs at `target`, never following a symlink there: the
  // one step that makes a volume visible, complete or not at all.
  virtual std::error_code Attach(const std::string& target) = 0;
};

class HostFs {
 public:
  virtual ~HostFs() = default;

  virtual PathKind Inspect(const std::string& path) = 0;
  virtual std::error_code MakeDir(const std::string& path, mode_t mode) = 0;
  // Removes an empty directory: rmdir only, so a file, socket, FIFO, device
  // or symlink is never deleted (ENOTDIR). A missing path is success.
  virtual std::error_code Remove(const std::string& path) = 0;
  // Creates a new tmpfs (nosuid,nodev,noexec) attached nowhere: invisible to
  // everyone, and freed by the kernel when dropped or when the driver dies.
  virtual std::expected<std::unique_ptr<PendingMount>, std::error_code>
  MakeTmpfs(const TmpfsSpec& spec) = 0;
  // Unmounts the top mount at `target`, detaching it lazily if busy.
  // EINVAL means `target` was not a mount point.
  virtual std::error_code Unmount(const std::string& target) = 0;
  // Reads at most `max_bytes` of a file without following a symlink.
  virtual std::expected<FileSnapshot, std::error_code> ReadFile(
      const std::string& path, size_t max_bytes) = 0;
  virtual std::expected<FsInfo, std::error_code> StatFs(
      const std::string& path) = 0;
};

// How the real HostFs makes and attaches a tmpfs.
enum class MountApi {
  // fsopen/fsconfig/fsmount, filled detached, then move_mount (Linux 5.2+):
  // crash-atomic.
  kFsmount,
  // mount(2) on the target, fill, remount read-only: for kernels (or
  // seccomp filters) without fsopen. A crash mid-publish can leave a
  // half-made volume, which the next publish of the target repairs.
  kMount,
};

// kFsmount if this kernel lets us call fsopen, else kMount (fsopen answers
// ENOSYS: Linux < 5.2, or a seccomp filter that hides it).
MountApi DetectMountApi();

// The real thing: Linux syscalls. Everything but making a tmpfs is shared;
// FsmountHostFs and ClassicMountHostFs each make their own PendingMount.
class LinuxHostFs : public HostFs {
 public:
  virtual MountApi api() const = 0;

  PathKind Inspect(const std::string& path) final;
  std::error_code MakeDir(const std::string& path, mode_t mode) final;
  std::error_code Remove(const std::string& path) final;
  std::error_code Unmount(const std::string& target) final;
  std::expected<FileSnapshot, std::error_code> ReadFile(const std::string& path,
                                                        size_t max_bytes) final;
  std::expected<FsInfo, std::error_code> StatFs(const std::string& path) final;
};

// The tmpfs is a real detached mount (fsopen/fsmount), filled and sealed
// before move_mount attaches it: a driver killed at any point leaves either
// nothing at the target or the complete read-only volume.
class FsmountHostFs final : public LinuxHostFs {
 public:
  MountApi api() const override { return MountApi::kFsmount; }
  std::expected<std::unique_ptr<PendingMount>, std::error_code> MakeTmpfs(
      const TmpfsSpec& spec) override;
};

// mount(2) has no detached mounts: the pending tmpfs is only a plan, which
// Attach carries out on the target (mount, fill, remount read-only).
class ClassicMountHostFs final : public LinuxHostFs {
 public:
  MountApi api() const override { return MountApi::kMount; }
  std::expected<std::unique_ptr<PendingMount>, std::error_code> MakeTmpfs(
      const TmpfsSpec& spec) override;
};

std::unique_ptr<LinuxHostFs> MakeLinuxHostFs(MountApi api);

}  // namespace fcc::driver
