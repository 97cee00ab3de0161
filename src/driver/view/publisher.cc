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
// More stacked binds than this at one target is not ours to fix by looping.
constexpr int kMaxStackedMounts = 64;

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

bool ViewPublisher::HoldsView(const std::string& target) {
  if (fs_.Inspect(target) != PathKind::kMountRoot) return false;
  auto id = binder_.Identify(target);
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
  auto id = binder_.Identify(target);
  std::optional<View> copy = id ? views_.CopyOf(spec.view, *id) : std::nullopt;
  if (!copy) {
    return Status(StatusCode::ALREADY_EXISTS,
                  fmt::format("target_path {} already holds another mount; "
                              "unpublish it before publishing view {} there",
                              target, spec.view));
  }
  // Counted already, unless an earlier process's bind was missed at start.
  count_.Adopt({{target, spec.pod_uid, VolumeKind::kView}});
  auto sealed = binder_.IsSealed(target);
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
    ec = binder_.BindSealed(view.path, target);
  } else if (auto staged = StagedCopy(view); staged) {
    ec = binder_.BindFromStaging(*staged, target);
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
    if (auto ec = binder_.MakePrivate(dir)) {
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
    auto id = binder_.Identify(staged);
    auto sealed = binder_.IsSealed(staged);
    if (id && *id == view.root && sealed && *sealed) return staged;
    if (auto ec = fs_.Unmount(staged)) return std::unexpected(ec);
  }
  if (auto ec = fs_.MakeDir(staged, kStagingDirMode);
      ec && ec != std::errc::file_exists) {
    return std::unexpected(ec);
  }
  if (auto ec = binder_.StageSealed(view.path, staged)) {
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
