#include "driver/host_fs.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "common/file.h"
#include "common/system_error.h"
#include "common/unique_fd.h"
#include "common/volume_contract.h"

namespace fcc::driver {
namespace {

using common::LastError;

constexpr unsigned kTmpfsMountFlags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
constexpr unsigned kTmpfsMountAttrs =
    MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;

// Creates `name` in the directory `dir` (O_EXCL, never through a symlink)
// with `content`, then sets owner and mode.
std::error_code WriteFileAt(int dir, const std::string& name,
                            std::string_view content, mode_t mode, uid_t uid,
                            gid_t gid) {
  common::UniqueFd fd(openat(
      dir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
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

}  // namespace

std::vector<std::pair<std::string, std::string>> TmpfsParameters(
    const TmpfsSpec& spec) {
  std::vector<std::pair<std::string, std::string>> parameters = {
      {"size", std::to_string(spec.size_bytes)},
      {"nr_inodes", std::to_string(spec.nr_inodes)},
      {"mode", fmt::format("0{:o}", spec.mode)},
      {"uid", std::to_string(spec.uid)},
      {"gid", std::to_string(spec.gid)}};
  if (spec.noswap) parameters.emplace_back("noswap", "");
  if (!spec.selinux_context.empty()) {
    parameters.emplace_back("context", spec.selinux_context);
  }
  return parameters;
}

std::string TmpfsMountData(const TmpfsSpec& spec) {
  std::string data;
  for (const auto& [key, value] : TmpfsParameters(spec)) {
    if (!data.empty()) data += ',';
    data += key;
    if (value.empty()) continue;
    const bool quote = value.find(',') != std::string::npos;
    data += quote ? "=\"" + value + "\"" : "=" + value;
  }
  return data;
}

namespace {

int SetParameter(int fs_context, const std::string& key,
                 const std::string& value) {
  return value.empty()
             ? fsconfig(fs_context, FSCONFIG_SET_FLAG, key.c_str(), nullptr, 0)
             : fsconfig(fs_context, FSCONFIG_SET_STRING, key.c_str(),
                        value.c_str(), 0);
}

}  // namespace

std::error_code ProbeTmpfsParameter(const std::string& key,
                                    const std::string& value) {
  common::UniqueFd context(fsopen("tmpfs", FSOPEN_CLOEXEC));
  if (!context || SetParameter(context.get(), key, value) != 0) {
    return LastError();
  }
  return {};
}

PathKind LinuxHostFs::Inspect(const std::string& path) {
  struct statx stx{};
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
  struct stat self{}, parent{};
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
  return LastError();
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
  common::UniqueFd fd(open(
      path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (!fd) return std::unexpected(LastError());
  struct stat st{};
  if (fstat(fd.get(), &st) != 0) return std::unexpected(LastError());
  FileSnapshot snap;
  snap.mode = st.st_mode & 07777;
  snap.uid = st.st_uid;
  snap.gid = st.st_gid;
  snap.regular = S_ISREG(st.st_mode);
  if (!snap.regular) return snap;
  std::string content(max_bytes, '\0');
  const auto got = common::ReadFull(fd.get(), content);
  if (!got) {
    snap.content = curve::Secret(std::move(content));  // wiped on return
    return std::unexpected(got.error());
  }
  content.resize(*got);
  snap.content = curve::Secret(std::move(content));
  return snap;
}

std::expected<FsInfo, std::error_code> LinuxHostFs::StatFs(
    const std::string& path) {
  struct statfs fs{};
  if (statfs(path.c_str(), &fs) != 0) return std::unexpected(LastError());
  return FsInfo{.is_tmpfs = fs.f_type == TMPFS_MAGIC,
                .read_only = (fs.f_flags & ST_RDONLY) != 0,
                .max_inodes = fs.f_files};
}

MountApi DetectMountApi() {
  common::UniqueFd probe(fsopen("tmpfs", FSOPEN_CLOEXEC));
  return !probe && errno == ENOSYS ? MountApi::kMount : MountApi::kFsmount;
}

std::unique_ptr<LinuxHostFs> MakeLinuxHostFs(MountApi api) {
  switch (api) {
    case MountApi::kFsmount:
      return std::make_unique<FsmountHostFs>();
    case MountApi::kMount:
      return std::make_unique<ClassicMountHostFs>();
  }
  return std::make_unique<FsmountHostFs>();  // not reached: every api is above
}

// --- fsopen/fsmount: a detached tmpfs --------------------------------------

namespace {

class DetachedTmpfs final : public PendingMount {
 public:
  DetachedTmpfs(common::UniqueFd context, common::UniqueFd mount)
      : context_(std::move(context)), mount_(std::move(mount)) {}

  std::error_code WriteNewFile(const std::string& name,
                               std::string_view content, mode_t mode, uid_t uid,
                               gid_t gid) override {
    return WriteFileAt(mount_.get(), name, content, mode, uid, gid);
  }

  std::error_code MakeReadOnly() override {
    if (fsconfig(context_.get(), FSCONFIG_SET_FLAG, "ro", nullptr, 0) != 0 ||
        fsconfig(context_.get(), FSCONFIG_CMD_RECONFIGURE, nullptr, nullptr,
                 0) != 0) {
      return LastError();
    }
    // The read-only superblock already refuses every write; the mount flag
    // (mount_setattr, Linux 5.12+) also shows "ro" in the mount table. Older
    // kernels go without it.
    mount_attr attr{};
    attr.attr_set = MOUNT_ATTR_RDONLY;
    if (mount_setattr(mount_.get(), "", AT_EMPTY_PATH, &attr, sizeof(attr)) !=
            0 &&
        errno != ENOSYS) {
      return LastError();
    }
    return {};
  }

  std::error_code Attach(const std::string& target) override {
    // Without MOVE_MOUNT_T_SYMLINKS a symlink at `target` is not followed.
    if (move_mount(mount_.get(), "", AT_FDCWD, target.c_str(),
                   MOVE_MOUNT_F_EMPTY_PATH) != 0) {
      return LastError();
    }
    return {};
  }

 private:
  // fsopen: configures (and later reconfigures) the superblock.
  common::UniqueFd context_;
  // fsmount: the detached mount.
  common::UniqueFd mount_;
};

}  // namespace

std::expected<std::unique_ptr<PendingMount>, std::error_code>
FsmountHostFs::MakeTmpfs(const TmpfsSpec& spec) {
  common::UniqueFd context(fsopen("tmpfs", FSOPEN_CLOEXEC));
  if (!context) return std::unexpected(LastError());
  const int ctx = context.get();
  const char* source = common::kDriverName;
  if (fsconfig(ctx, FSCONFIG_SET_STRING, "source", source, 0) != 0) {
    return std::unexpected(LastError());
  }
  for (const auto& [key, value] : TmpfsParameters(spec)) {
    if (SetParameter(ctx, key, value) != 0) return std::unexpected(LastError());
  }
  if (fsconfig(ctx, FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
    return std::unexpected(LastError());
  }
  common::UniqueFd mount(fsmount(ctx, FSMOUNT_CLOEXEC, kTmpfsMountAttrs));
  if (!mount) return std::unexpected(LastError());
  return std::make_unique<DetachedTmpfs>(std::move(context), std::move(mount));
}

// --- mount(2): a plan carried out on the target ----------------------------

namespace {

class PlannedTmpfs final : public PendingMount {
 public:
  explicit PlannedTmpfs(const TmpfsSpec& spec) : spec_(spec) {}

  std::error_code WriteNewFile(const std::string& name,
                               std::string_view content, mode_t mode, uid_t uid,
                               gid_t gid) override {
    files_.push_back({.name = name,
                      .content = curve::Secret(std::string(content)),
                      .mode = mode,
                      .uid = uid,
                      .gid = gid});
    return {};
  }

  std::error_code MakeReadOnly() override {
    read_only_ = true;
    return {};
  }

  // Mounts on the target, fills, remounts read-only; any failure after the
  // mount unmounts it again.
  std::error_code Attach(const std::string& target) override {
    auto root = MountOnTarget(target);
    if (!root) return root.error();
    if (auto ec = Fill(root->get())) {
      umount2(FdPath(root->get()).c_str(), MNT_DETACH);  // the tmpfs we made
      return ec;
    }
    return {};
  }

 private:
  struct File {
    std::string name;
    curve::Secret content;
    mode_t mode = 0;
    uid_t uid = 0;
    gid_t gid = 0;
  };

  // Mounts the tmpfs on `target` and opens its root.
  std::expected<common::UniqueFd, std::error_code> MountOnTarget(
      const std::string& target) const {
    // O_NOFOLLOW|O_DIRECTORY: a symlink at the target fails (ENOTDIR) rather
    // than being followed, as with move_mount.
    common::UniqueFd dir(
        open(target.c_str(), O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC));
    if (!dir) return std::unexpected(LastError());
    const std::string data = TmpfsMountData(spec_);
    if (mount(common::kDriverName, FdPath(dir.get()).c_str(), "tmpfs",
              kTmpfsMountFlags, data.c_str()) != 0) {
      return std::unexpected(LastError());
    }
    // The path now resolves to the new tmpfs's root.
    common::UniqueFd root(
        open(target.c_str(), O_RDONLY | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC));
    if (!root) {
      const std::error_code ec = LastError();
      umount2(target.c_str(), UMOUNT_NOFOLLOW | MNT_DETACH);
      return std::unexpected(ec);
    }
    return root;
  }

  // Writes the planned files into the mounted root, then seals it.
  std::error_code Fill(int root) const {
    for (const File& file : files_) {
      if (auto ec = WriteFileAt(root, file.name, file.content.reveal(),
                                file.mode, file.uid, file.gid)) {
        return ec;
      }
    }
    if (read_only_ &&
        mount(nullptr, FdPath(root).c_str(), nullptr,
              MS_REMOUNT | MS_RDONLY | kTmpfsMountFlags, nullptr) != 0) {
      return LastError();
    }
    return {};
  }

  const TmpfsSpec spec_;
  std::vector<File> files_;
  bool read_only_ = false;
};

}  // namespace

std::expected<std::unique_ptr<PendingMount>, std::error_code>
ClassicMountHostFs::MakeTmpfs(const TmpfsSpec& spec) {
  return std::make_unique<PlannedTmpfs>(spec);
}

}  // namespace fcc::driver
