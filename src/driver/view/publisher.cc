#include "driver/view/publisher.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/statvfs.h>

#include <filesystem>

#include "common/unique_fd.h"
#include "driver/mountinfo.h"
#include "driver/target_dir.h"

namespace fcc::driver {
namespace {

using grpc::Status;
using grpc::StatusCode;

constexpr mode_t kStagingDirMode = 0700;
constexpr unsigned long kSealFlags = MS_RDONLY | MS_NOSUID | MS_NODEV;
// More stacked binds than this at one target is not ours to fix by looping.
constexpr int kMaxStackedMounts = 64;

std::error_code Errno() { return {errno, std::generic_category()}; }

// `dir` (made if missing) as a private mount of its own: binds made below it
// propagate nowhere, wherever it is.
std::error_code MakePrivateMount(HostFs& fs, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return ec;
  if (fs.Inspect(dir) != PathKind::kMountRoot &&
      mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    return Errno();
  }
  if (mount(nullptr, dir.c_str(), nullptr, MS_PRIVATE, nullptr) != 0) {
    return Errno();
  }
  return {};
}

// A remount: it changes this mount namespace's copy only.
std::error_code SealBind(const std::string& target) {
  if (mount(nullptr, target.c_str(), nullptr, MS_REMOUNT | MS_BIND | kSealFlags,
            nullptr) != 0) {
    return Errno();
  }
  return {};
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

ViewBindApi DetectViewBindApi() {
  // Invalid arguments: EBADF where the call exists, ENOSYS where it does not
  // (Linux < 5.12, or a seccomp filter that hides it).
  mount_attr attr{};
  if (mount_setattr(-1, "", AT_EMPTY_PATH, &attr, sizeof(attr)) != 0 &&
      errno == ENOSYS) {
    return ViewBindApi::kStaged;
  }
  return ViewBindApi::kDetached;
}

std::error_code BindReadOnly(const std::string& source,
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

std::error_code StageSealedBind(const std::string& source,
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

std::error_code BindFromStaging(const std::string& staged,
                                const std::string& target) {
  if (mount(staged.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    return Errno();
  }
  // The kernel copies the source mount's flags into a bind (and into every
  // copy propagated from it); a bind without them is not left to a pod.
  auto sealed = IsSealedBind(target);
  if (!sealed || !*sealed) {
    umount2(target.c_str(), MNT_DETACH);
    return sealed ? std::make_error_code(std::errc::read_only_file_system)
                  : sealed.error();
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
  switch (fs_.Inspect(spec.target_path)) {
    case PathKind::kMissing:
      // kubelet creates only the parent; the target directory is ours.
      return BindNew(spec, *view, /*missing=*/true);
    case PathKind::kDirectory:
      return BindNew(spec, *view, /*missing=*/false);
    case PathKind::kMountRoot:
      return CheckBound(spec);
    default:
      return Status(StatusCode::FAILED_PRECONDITION,
                    fmt::format("target_path {} exists and is not a directory; "
                                "the driver never follows or replaces it",
                                spec.target_path));
  }
}

Status ViewPublisher::BindNew(const ViewPublishSpec& spec, const View& view,
                              bool missing) {
  const std::string& target = spec.target_path;
  auto counted = count_.Reserve(target, spec.pod_uid, VolumeKind::kView);
  if (!counted) return Status(StatusCode::RESOURCE_EXHAUSTED, counted.error());
  if (missing) {
    if (Status made = MakeTargetDir(fs_, target); !made.ok()) return made;
  }
  Status bound = Bind(spec, view, /*created_dir=*/missing);
  if (bound.ok()) counted->Keep();
  return bound;
}

Status ViewPublisher::CheckBound(const ViewPublishSpec& spec) {
  const std::string& target = spec.target_path;
  // Any stored copy of this view: after an upgrade that changed the view, a
  // running pod keeps the copy it was started with.
  auto id = IdentifyPath(target);
  std::optional<View> copy = id ? views_.CopyOf(spec.view, *id) : std::nullopt;
  if (!copy) {
    return Status(StatusCode::ALREADY_EXISTS,
                  fmt::format("target_path {} already holds another mount; "
                              "unpublish it before publishing view {} there",
                              target, spec.view));
  }
  // Counted already, unless an earlier process's bind was missed at start.
  count_.Adopt({{target, spec.pod_uid, VolumeKind::kView}});
  auto sealed = IsSealedBind(target);
  if (sealed && *sealed) return Status::OK;
  // Binds of this one in other namespaces (kubelet's, which containers are
  // bound from) are as unsealed, and a remount here would not reach them:
  // the bind is taken down everywhere and made again, sealed.
  spdlog::warn(
      "volume {}: view {} at {} lost read-only/nosuid/nodev; binding it "
      "again",
      spec.volume_id, spec.view, target);
  if (auto ec = fs_.Unmount(target)) {
    return TargetFailure("unmounting the unsealed view", target, ec);
  }
  return Bind(spec, *copy, /*created_dir=*/false);
}

Status ViewPublisher::Bind(const ViewPublishSpec& spec, const View& view,
                           bool created_dir) {
  const std::string& target = spec.target_path;
  std::error_code ec;
  if (options_.api == ViewBindApi::kDetached) {
    ec = BindReadOnly(view.path, target);
  } else if (auto staged = StagedCopy(view); staged) {
    ec = BindFromStaging(*staged, target);
  } else {
    ec = staged.error();
  }
  if (ec) {
    if (created_dir) {
      if (auto removed = fs_.Remove(target)) {
        spdlog::error("volume {}: rollback could not remove {}: {}",
                      spec.volume_id, target, removed.message());
      }
    }
    return TargetFailure(fmt::format("binding view {}", view.name), target, ec);
  }
  spdlog::info("published volume {} at {}: view {} ({}) pod {} ({})",
               spec.volume_id, target, view.name, view.digest, spec.pod_name,
               spec.pod_uid);
  return Status::OK;
}

std::expected<std::string, std::error_code> ViewPublisher::StagedCopy(
    const View& view) {
  std::lock_guard lock(staging_mu_);
  const std::string& dir = options_.staging_dir;
  if (!staging_private_) {
    if (auto ec = MakePrivateMount(fs_, dir)) {
      spdlog::error("cannot make --view-staging-dir {} a private mount: {}",
                    dir, ec.message());
      return std::unexpected(ec);
    }
    staging_private_ = true;
  }
  std::string staged =
      dir + "/" + std::filesystem::path(view.path).filename().string();
  // A staging bind of an earlier driver in this mount namespace is reused
  // when it is this copy, sealed; anything else there is taken down.
  for (int i = 0;
       i < kMaxStackedMounts && fs_.Inspect(staged) == PathKind::kMountRoot;
       ++i) {
    auto id = IdentifyPath(staged);
    auto sealed = IsSealedBind(staged);
    if (id && *id == view.root && sealed && *sealed) return staged;
    if (auto ec = fs_.Unmount(staged)) return std::unexpected(ec);
  }
  if (auto ec = fs_.MakeDir(staged, kStagingDirMode);
      ec && ec != std::errc::file_exists) {
    return std::unexpected(ec);
  }
  if (auto ec = StageSealedBind(view.path, staged)) {
    spdlog::error("cannot stage view {} at {}: {}", view.name, staged,
                  ec.message());
    return std::unexpected(ec);
  }
  spdlog::info("view {} staged read-only at {}", view.name, staged);
  return staged;
}

Status ViewPublisher::UnmountViews(const UnpublishSpec& spec) {
  const auto guard = locks_.Lock(spec.volume_id);
  const std::string& target = spec.target_path;
  for (int i = 0; i < kMaxStackedMounts && HoldsView(target); ++i) {
    if (auto ec = fs_.Unmount(target)) {
      return TargetFailure("unmounting the view", target, ec);
    }
    spdlog::info("unmounted view volume {} at {}", spec.volume_id, target);
  }
  return Status::OK;
}

std::expected<size_t, std::string> ViewPublisher::AdoptMounted(
    std::string_view kubelet_dir) {
  std::vector<dev_t> devices;
  for (const View& view : views_.served()) devices.push_back(view.root.dev);
  for (const StoredView& copy : views_.stored()) {
    devices.push_back(copy.root.dev);
  }
  if (devices.empty()) return 0;
  auto mountinfo = ReadMountInfo();
  if (!mountinfo) return std::unexpected(mountinfo.error());
  std::vector<MountedVolume> binds;
  for (MountedVolume& candidate :
       MountsOfDevicesIn(*mountinfo, kubelet_dir, devices)) {
    if (HoldsView(candidate.target)) binds.push_back(std::move(candidate));
  }
  count_.Adopt(binds);
  return binds.size();
}

}  // namespace fcc::driver
