#include "driver/host_fs.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "driver/unique_fd.h"

namespace fcc::driver {
namespace {

std::error_code Errno(int e) { return {e, std::system_category()}; }
std::error_code LastError() { return Errno(errno); }

}  // namespace

PathKind LinuxHostFs::Inspect(const std::string& path) {
  struct statx stx {};
  if (statx(AT_FDCWD, path.c_str(), AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT,
            STATX_TYPE, &stx) != 0) {
    return errno == ENOENT ? PathKind::kMissing : PathKind::kUnreadable;
  }
  if (S_ISLNK(stx.stx_mode)) return PathKind::kSymlink;
  if (!S_ISDIR(stx.stx_mode)) return PathKind::kOther;
  // STATX_ATTR_MOUNT_ROOT (Linux 5.8+) sees bind mounts of the same
  // filesystem too, which a st_dev comparison with the parent would miss.
  if (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) {
    return (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT) ? PathKind::kMountRoot
                                                        : PathKind::kDirectory;
  }
  struct stat self {
  }, parent{};
  const std::string parent_path = path + "/..";
  if (stat(path.c_str(), &self) != 0 || stat(parent_path.c_str(), &parent)) {
    return PathKind::kUnreadable;
  }
  return self.st_dev != parent.st_dev ? PathKind::kMountRoot
                                      : PathKind::kDirectory;
}

std::error_code LinuxHostFs::MakeDir(const std::string& path, mode_t mode) {
  if (mkdir(path.c_str(), mode) != 0) return LastError();
  return {};
}

std::error_code LinuxHostFs::Remove(const std::string& path) {
  if (rmdir(path.c_str()) == 0 || errno == ENOENT) return {};
  if (errno == ENOTDIR && unlink(path.c_str()) == 0) return {};
  return LastError();
}

MountApi DetectMountApi() {
  UniqueFd probe(fsopen("tmpfs", FSOPEN_CLOEXEC));
  return !probe && errno == ENOSYS ? MountApi::kMount : MountApi::kFsmount;
}

const char* MountApiName(MountApi api) {
  return api == MountApi::kFsmount ? "fsmount" : "mount";
}

namespace {

struct FsmountPendingMount : PendingMount {
  UniqueFd context;  // fsopen: configures (and later reconfigures) the sb
  UniqueFd mount;    // fsmount: the detached mount
};

// mount(2) has no detached mounts: the file and the read-only seal wait
// here until Attach mounts the tmpfs on the target and carries them out.
struct PlannedMount : PendingMount {
  struct File {
    std::string name;
    curve::Secret content;
    mode_t mode = 0;
    uid_t uid = 0;
    gid_t gid = 0;
  };
  std::string options;
  std::vector<File> files;
  bool read_only = false;
};

FsmountPendingMount& Fsmount(PendingMount& mount) {
  return static_cast<FsmountPendingMount&>(mount);
}
PlannedMount& Planned(PendingMount& mount) {
  return static_cast<PlannedMount&>(mount);
}

// Creates `name` in the directory `dir` (O_EXCL, never through a symlink)
// with `content`, then sets owner and mode.
std::error_code WriteFileAt(int dir, const std::string& name,
                            std::string_view content, mode_t mode, uid_t uid,
                            gid_t gid) {
  UniqueFd fd(openat(dir, name.c_str(),
                     O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                     0));  // no permissions until the owner is right
  if (!fd) return LastError();
  size_t written = 0;
  while (written < content.size()) {
    const ssize_t n =
        write(fd.get(), content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return LastError();
    }
    written += static_cast<size_t>(n);
  }
  if (fchown(fd.get(), uid, gid) != 0 || fchmod(fd.get(), mode) != 0) {
    return LastError();
  }
  return {};
}

// "/proc/self/fd/N": mount(2) given this path acts on the object `fd` holds,
// not on whatever a path name might resolve to by the time it runs.
std::string FdPath(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

// The mount(2) publish: mount on the target, fill, remount read-only; any
// failure after the mount unmounts it again.
std::error_code AttachWithMount(PlannedMount& plan, const std::string& target) {
  // O_NOFOLLOW|O_DIRECTORY: a symlink at the target fails (ENOTDIR) rather
  // than being followed, as with move_mount.
  UniqueFd dir(
      open(target.c_str(), O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return LastError();
  if (mount(kMountSource, FdPath(dir.get()).c_str(), "tmpfs",
            MS_NOSUID | MS_NODEV | MS_NOEXEC, plan.options.c_str()) != 0) {
    return LastError();
  }
  // The path now resolves to the new tmpfs's root.
  UniqueFd root(
      open(target.c_str(), O_RDONLY | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC));
  if (!root) {
    const std::error_code ec = LastError();
    umount2(target.c_str(), UMOUNT_NOFOLLOW | MNT_DETACH);
    return ec;
  }
  const auto fail = [&](std::error_code ec) {
    umount2(FdPath(root.get()).c_str(), MNT_DETACH);  // the tmpfs we made
    return ec;
  };
  for (const PlannedMount::File& file : plan.files) {
    if (auto ec = WriteFileAt(root.get(), file.name, file.content.reveal(),
                              file.mode, file.uid, file.gid)) {
      return fail(ec);
    }
  }
  if (plan.read_only &&
      mount(nullptr, FdPath(root.get()).c_str(), nullptr,
            MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
            nullptr) != 0) {
    return fail(LastError());
  }
  return {};
}

}  // namespace

std::expected<std::unique_ptr<PendingMount>, std::error_code>
LinuxHostFs::MakeTmpfs(const std::string& options) {
  if (api_ == MountApi::kMount) {
    auto plan = std::make_unique<PlannedMount>();
    plan->options = options;
    return plan;
  }
  auto pending = std::make_unique<FsmountPendingMount>();
  pending->context = UniqueFd(fsopen("tmpfs", FSOPEN_CLOEXEC));
  if (!pending->context) return std::unexpected(LastError());
  const int ctx = pending->context.get();
  if (fsconfig(ctx, FSCONFIG_SET_STRING, "source", kMountSource, 0) != 0) {
    return std::unexpected(LastError());
  }
  // "key=value,key=value": each a tmpfs parameter.
  size_t start = 0;
  while (start < options.size()) {
    size_t end = options.find(',', start);
    if (end == std::string::npos) end = options.size();
    const std::string item = options.substr(start, end - start);
    const size_t eq = item.find('=');
    if (eq == std::string::npos) return std::unexpected(Errno(EINVAL));
    const std::string key = item.substr(0, eq);
    const std::string value = item.substr(eq + 1);
    if (fsconfig(ctx, FSCONFIG_SET_STRING, key.c_str(), value.c_str(), 0) !=
        0) {
      return std::unexpected(LastError());
    }
    start = end + 1;
  }
  if (fsconfig(ctx, FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
    return std::unexpected(LastError());
  }
  pending->mount = UniqueFd(
      fsmount(ctx, FSMOUNT_CLOEXEC,
              MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC));
  if (!pending->mount) return std::unexpected(LastError());
  return pending;
}

std::error_code LinuxHostFs::WriteNewFile(PendingMount& mount,
                                          const std::string& name,
                                          std::string_view content, mode_t mode,
                                          uid_t uid, gid_t gid) {
  if (api_ == MountApi::kMount) {
    Planned(mount).files.push_back(
        {.name = name,
         .content = curve::Secret(std::string(content)),
         .mode = mode,
         .uid = uid,
         .gid = gid});
    return {};
  }
  return WriteFileAt(Fsmount(mount).mount.get(), name, content, mode, uid, gid);
}

std::error_code LinuxHostFs::MakeReadOnly(PendingMount& mount) {
  if (api_ == MountApi::kMount) {
    Planned(mount).read_only = true;
    return {};
  }
  FsmountPendingMount& m = Fsmount(mount);
  if (fsconfig(m.context.get(), FSCONFIG_SET_FLAG, "ro", nullptr, 0) != 0 ||
      fsconfig(m.context.get(), FSCONFIG_CMD_RECONFIGURE, nullptr, nullptr,
               0) != 0) {
    return LastError();
  }
  // The read-only superblock already refuses every write; the mount flag
  // (mount_setattr, Linux 5.12+) also shows "ro" in the mount table. Older
  // kernels go without it.
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_RDONLY;
  if (mount_setattr(m.mount.get(), "", AT_EMPTY_PATH, &attr, sizeof(attr)) !=
          0 &&
      errno != ENOSYS) {
    return LastError();
  }
  return {};
}

std::error_code LinuxHostFs::Attach(PendingMount& mount,
                                    const std::string& target) {
  if (api_ == MountApi::kMount) return AttachWithMount(Planned(mount), target);
  // Without MOVE_MOUNT_T_SYMLINKS a symlink at `target` is not followed.
  if (move_mount(Fsmount(mount).mount.get(), "", AT_FDCWD, target.c_str(),
                 MOVE_MOUNT_F_EMPTY_PATH) != 0) {
    return LastError();
  }
  return {};
}

std::error_code LinuxHostFs::Unmount(const std::string& target) {
  if (umount2(target.c_str(), UMOUNT_NOFOLLOW) == 0) return {};
  if (errno == EBUSY &&
      umount2(target.c_str(), UMOUNT_NOFOLLOW | MNT_DETACH) == 0) {
    return {};
  }
  return LastError();
}

std::expected<FileSnapshot, std::error_code> LinuxHostFs::ReadFile(
    const std::string& path, size_t max_bytes) {
  UniqueFd fd(open(path.c_str(),
                   O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (!fd) return std::unexpected(LastError());
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return std::unexpected(LastError());
  FileSnapshot snap;
  snap.mode = st.st_mode & 07777;
  snap.uid = st.st_uid;
  snap.gid = st.st_gid;
  snap.regular = S_ISREG(st.st_mode);
  if (!snap.regular) return snap;
  std::string content(max_bytes, '\0');
  size_t got = 0;
  while (got < max_bytes) {
    const ssize_t n = read(fd.get(), content.data() + got, max_bytes - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      const auto error = LastError();
      snap.content = curve::Secret(std::move(content));  // wiped on return
      return std::unexpected(error);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  content.resize(got);
  snap.content = curve::Secret(std::move(content));
  return snap;
}

std::expected<FsInfo, std::error_code> LinuxHostFs::StatFs(
    const std::string& path) {
  struct statfs fs {};
  if (statfs(path.c_str(), &fs) != 0) return std::unexpected(LastError());
  return FsInfo{.is_tmpfs = fs.f_type == TMPFS_MAGIC,
                .read_only = (fs.f_flags & ST_RDONLY) != 0};
}

}  // namespace fcc::driver
