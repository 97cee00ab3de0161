#include "driver/view/binder.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/statvfs.h>

#include <filesystem>

#include "common/unique_fd.h"

namespace fcc::driver {
namespace {

constexpr unsigned long kSealFlags = MS_RDONLY | MS_NOSUID | MS_NODEV;

std::error_code Errno() { return {errno, std::generic_category()}; }

// A remount: it changes this mount namespace's copy only.
std::error_code SealBind(const std::string& target) {
  if (mount(nullptr, target.c_str(), nullptr, MS_REMOUNT | MS_BIND | kSealFlags,
            nullptr) != 0) {
    return Errno();
  }
  return {};
}

}  // namespace

std::expected<FileId, std::error_code> LinuxViewBinder::Identify(
    const std::string& path) {
  return IdentifyPath(path);
}

std::expected<bool, std::error_code> LinuxViewBinder::IsSealed(
    const std::string& path) {
  struct statvfs st{};
  if (statvfs(path.c_str(), &st) != 0) return std::unexpected(Errno());
  const unsigned long want = ST_RDONLY | ST_NOSUID | ST_NODEV;
  return (st.f_flag & want) == want;
}

std::error_code LinuxViewBinder::BindSealed(const std::string& source,
                                            const std::string& target) {
  // A detached clone, sealed before it is attached: flags changed after the
  // attach stay in this mount namespace, while the bind itself propagates
  // to kubelet's (the pods directory is shared), which would hold it
  // writable.
  common::UniqueFd tree(
      open_tree(AT_FDCWD, source.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
  if (!tree) return Errno();
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (mount_setattr(tree.get(), "", AT_EMPTY_PATH, &attr, sizeof(attr)) != 0) {
    return Errno();
  }
  // Without MOVE_MOUNT_T_SYMLINKS a symlink at `target` is not followed.
  if (move_mount(tree.get(), "", AT_FDCWD, target.c_str(),
                 MOVE_MOUNT_F_EMPTY_PATH) != 0) {
    return Errno();
  }
  return {};
}

std::error_code LinuxViewBinder::StageSealed(const std::string& source,
                                             const std::string& staging) {
  if (mount(source.c_str(), staging.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    return Errno();
  }
  // Private before it is sealed: a bind of a shared mount joins its peer
  // group, and binds made from a shared staging mount would too.
  std::error_code ec;
  if (mount(nullptr, staging.c_str(), nullptr, MS_PRIVATE, nullptr) != 0) {
    ec = Errno();
  } else {
    ec = SealBind(staging);
  }
  if (ec) umount2(staging.c_str(), MNT_DETACH);
  return ec;
}

std::error_code LinuxViewBinder::BindFromStaging(const std::string& staged,
                                                 const std::string& target) {
  if (mount(staged.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    return Errno();
  }
  // The kernel copies the source mount's flags into a bind (and into every
  // copy propagated from it); a bind without them is not left to a pod.
  auto sealed = IsSealed(target);
  if (!sealed || !*sealed) {
    umount2(target.c_str(), MNT_DETACH);
    return sealed ? std::make_error_code(std::errc::read_only_file_system)
                  : sealed.error();
  }
  return {};
}

std::error_code LinuxViewBinder::MakePrivate(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return ec;
  if (fs_.Inspect(dir) != PathKind::kMountRoot &&
      mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    return Errno();
  }
  if (mount(nullptr, dir.c_str(), nullptr, MS_PRIVATE, nullptr) != 0) {
    return Errno();
  }
  return {};
}

}  // namespace fcc::driver
