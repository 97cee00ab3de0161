// The kernel operations publishing needs, behind one narrow interface so the
// publish logic can be tested with injected faults and without root.
#pragma once

#include <sys/types.h>

#include <expected>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

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

// A tmpfs not yet attached to any path. Publishing fills and seals it first
// and attaches it last. With the new mount API (fsopen/fsmount) it is a real
// detached mount, so a driver killed at any point leaves either nothing at
// the target or the complete read-only volume, never a half-made one. With
// mount(2) (kernels before 5.2) it is only a plan carried out by Attach.
class PendingMount {
 public:
  virtual ~PendingMount() = default;
};

struct FsInfo {
  bool is_tmpfs = false;
  bool read_only = false;
};

class HostFs {
 public:
  virtual ~HostFs() = default;

  virtual PathKind Inspect(const std::string& path) = 0;
  virtual std::error_code MakeDir(const std::string& path, mode_t mode) = 0;
  // Removes an empty directory, or a symlink or file (never following it).
  // A missing path is success.
  virtual std::error_code Remove(const std::string& path) = 0;
  // Creates a new tmpfs (nosuid,nodev,noexec; data options
  // "size=..,mode=..,uid=..,gid=..") attached nowhere: invisible to
  // everyone, and freed by the kernel when dropped or when the driver dies.
  virtual std::expected<std::unique_ptr<PendingMount>, std::error_code>
  MakeTmpfs(const std::string& options) = 0;
  // Creates a new file `name` in the pending tmpfs's root (O_EXCL, never
  // through a symlink) with `content`, then sets owner and mode.
  virtual std::error_code WriteNewFile(PendingMount& mount,
                                       const std::string& name,
                                       std::string_view content, mode_t mode,
                                       uid_t uid, gid_t gid) = 0;
  // Makes the pending tmpfs read-only: the superblock (so no bind of it can
  // write either) and the mount.
  virtual std::error_code MakeReadOnly(PendingMount& mount) = 0;
  // Attaches the pending tmpfs at `target`, never following a symlink
  // there: the one step that makes a volume visible, complete or not at all.
  virtual std::error_code Attach(PendingMount& mount,
                                 const std::string& target) = 0;
  // Unmounts the top mount at `target`, detaching it lazily if busy.
  // EINVAL means `target` was not a mount point.
  virtual std::error_code Unmount(const std::string& target) = 0;
  // Reads at most `max_bytes` of a file without following a symlink.
  virtual std::expected<FileSnapshot, std::error_code> ReadFile(
      const std::string& path, size_t max_bytes) = 0;
  virtual std::expected<FsInfo, std::error_code> StatFs(
      const std::string& path) = 0;
};

// How LinuxHostFs makes and attaches a tmpfs.
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
const char* MountApiName(MountApi api);

// The real thing: Linux syscalls.
class LinuxHostFs : public HostFs {
 public:
  explicit LinuxHostFs(MountApi api) : api_(api) {}
  MountApi api() const { return api_; }

  PathKind Inspect(const std::string& path) override;
  std::error_code MakeDir(const std::string& path, mode_t mode) override;
  std::error_code Remove(const std::string& path) override;
  std::expected<std::unique_ptr<PendingMount>, std::error_code> MakeTmpfs(
      const std::string& options) override;
  std::error_code WriteNewFile(PendingMount& mount, const std::string& name,
                               std::string_view content, mode_t mode, uid_t uid,
                               gid_t gid) override;
  std::error_code MakeReadOnly(PendingMount& mount) override;
  std::error_code Attach(PendingMount& mount,
                         const std::string& target) override;
  std::error_code Unmount(const std::string& target) override;
  std::expected<FileSnapshot, std::error_code> ReadFile(
      const std::string& path, size_t max_bytes) override;
  std::expected<FsInfo, std::error_code> StatFs(
      const std::string& path) override;

 private:
  const MountApi api_;
};

// The mount source name every volume of this driver carries, so an operator
// can find them: `findmnt -t tmpfs -S curve.minicluster.dev`.
inline constexpr char kMountSource[] = "curve.minicluster.dev";

}  // namespace fcc::driver
