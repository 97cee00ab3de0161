#include "driver/view_publisher.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/statvfs.h>

#include "common/unique_fd.h"

namespace fcc::driver {
namespace {

using grpc::Status;
using grpc::StatusCode;

constexpr mode_t kTargetDirMode = 0750;
constexpr unsigned long kSealFlags = MS_RDONLY | MS_NOSUID | MS_NODEV;
// More stacked binds than this at one target is not ours to fix by looping.
constexpr int kMaxStackedMounts = 64;

std::error_code Errno() { return {errno, std::generic_category()}; }

Status Internal(std::string_view step, const std::string& target,
                std::error_code ec) {
  return Status(StatusCode::INTERNAL,
                fmt::format("{} at target_path {} failed: {}", step, target,
                            ec.message()));
}

}  // namespace

Status ViewNotServed(std::string_view view, const ViewCatalog& catalog) {
  if (const ViewFailure* failure = catalog.FindFailure(view)) {
    return Status(
        StatusCode::FAILED_PRECONDITION,
        fmt::format("volumeAttributes.view {:?}: the driver could not install "
                    "view {} on this node: {}. Fix that and restart the "
                    "driver's pod on this node (docs/admin/errors.md)",
                    view, view, failure->cause));
  }
  return Status(
      StatusCode::NOT_FOUND,
      fmt::format("volumeAttributes.view {:?} is not served on this node; it "
                  "serves: {}. Set the MiniCluster's spec.flux.view to one of "
                  "those, or install a driver release whose image carries {}",
                  view, catalog.ServedNames(), view));
}

std::error_code SealBind(const std::string& target) {
  if (mount(nullptr, target.c_str(), nullptr, MS_REMOUNT | MS_BIND | kSealFlags,
            nullptr) != 0) {
    return Errno();
  }
  return {};
}

std::error_code BindReadOnly(const std::string& source,
                             const std::string& target) {
  // A detached clone, sealed before it is attached: flags changed after the
  // attach stay in this mount namespace, while the bind itself propagates
  // to kubelet's (the pods directory is shared), which would hold it
  // writable. Without the new mount API: mount(2), sealed here only.
  common::UniqueFd tree(
      open_tree(AT_FDCWD, source.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
  if (!tree && errno != ENOSYS) return Errno();
  if (tree) {
    mount_attr attr{};
    attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if (mount_setattr(tree.get(), "", AT_EMPTY_PATH, &attr, sizeof(attr)) ==
        0) {
      // Without MOVE_MOUNT_T_SYMLINKS a symlink at `target` is not followed.
      if (move_mount(tree.get(), "", AT_FDCWD, target.c_str(),
                     MOVE_MOUNT_F_EMPTY_PATH) != 0) {
        return Errno();
      }
      return {};
    }
    if (errno != ENOSYS) return Errno();
  }
  if (mount(source.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    return Errno();
  }
  if (auto ec = SealBind(target)) {
    umount2(target.c_str(), MNT_DETACH);
    return ec;
  }
  return {};
}

std::expected<bool, std::error_code> IsSealedBind(const std::string& path) {
  struct statvfs st{};
  if (statvfs(path.c_str(), &st) != 0) return std::unexpected(Errno());
  const unsigned long want = ST_RDONLY | ST_NOSUID | ST_NODEV;
  return (st.f_flag & want) == want;
}

bool ViewPublisher::HoldsView(const std::string& target) {
  if (fs_.Inspect(target) != PathKind::kMountRoot) return false;
  auto id = IdentifyPath(target);
  return id && views_.IsViewRoot(*id);
}

Status ViewPublisher::Publish(const ViewPublishSpec& spec) {
  const View* view = views_.Find(spec.view);
  if (view == nullptr) return ViewNotServed(spec.view, views_);
  const auto guard = locks_.Lock(spec.volume_id);
  const std::string& target = spec.target_path;
  switch (fs_.Inspect(target)) {
    case PathKind::kMissing:
      // kubelet creates only the parent; the target directory is ours.
      if (auto ec = fs_.MakeDir(target, kTargetDirMode)) {
        if (ec == std::errc::no_such_file_or_directory) {
          return Status(StatusCode::FAILED_PRECONDITION,
                        fmt::format("the parent directory of target_path {} "
                                    "does not exist (kubelet creates it)",
                                    target));
        }
        return Internal("creating the directory", target, ec);
      }
      return Bind(spec, *view, /*created_dir=*/true);
    case PathKind::kDirectory:
      return Bind(spec, *view, /*created_dir=*/false);
    case PathKind::kMountRoot:
      break;
    default:
      return Status(StatusCode::FAILED_PRECONDITION,
                    fmt::format("target_path {} exists and is not a directory; "
                                "the driver never follows or replaces it",
                                target));
  }
  auto id = IdentifyPath(target);
  if (!id || !(*id == view->root)) {
    return Status(StatusCode::ALREADY_EXISTS,
                  fmt::format("target_path {} already holds another mount; "
                              "unpublish it before publishing view {} there",
                              target, spec.view));
  }
  auto sealed = IsSealedBind(target);
  if (sealed && *sealed) return Status::OK;
  spdlog::warn(
      "volume {}: view {} at {} lost read-only/nosuid/nodev; resealing",
      spec.volume_id, spec.view, target);
  if (auto ec = SealBind(target))
    return Internal("resealing the view", target, ec);
  return Status::OK;
}

Status ViewPublisher::Bind(const ViewPublishSpec& spec, const View& view,
                           bool created_dir) {
  const std::string& target = spec.target_path;
  if (auto ec = BindReadOnly(view.path, target)) {
    if (created_dir) {
      if (auto removed = fs_.Remove(target)) {
        spdlog::error("volume {}: rollback could not remove {}: {}",
                      spec.volume_id, target, removed.message());
      }
    }
    return Internal(fmt::format("binding view {}", view.name), target, ec);
  }
  spdlog::info("published volume {} at {}: view {} ({}) pod {} ({})",
               spec.volume_id, target, view.name, view.digest, spec.pod_name,
               spec.pod_uid);
  return Status::OK;
}

Status ViewPublisher::UnmountViews(const UnpublishSpec& spec) {
  const auto guard = locks_.Lock(spec.volume_id);
  const std::string& target = spec.target_path;
  for (int i = 0; i < kMaxStackedMounts && HoldsView(target); ++i) {
    if (auto ec = fs_.Unmount(target)) {
      return Internal("unmounting the view", target, ec);
    }
    spdlog::info("unmounted view volume {} at {}", spec.volume_id, target);
  }
  return Status::OK;
}

}  // namespace fcc::driver
