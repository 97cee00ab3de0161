#include "driver/publisher.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/volume_contract.h"
#include "curve/cert.h"
#include "driver/target_dir.h"

namespace fcc::driver {
namespace {

using grpc::Status;
using grpc::StatusCode;

constexpr mode_t kCertMode = 0400;  // Flux refuses group/other-readable certs
constexpr size_t kMaxCertBytes = 4096;
// More stacked mounts than this at one target is not ours to fix by looping.
constexpr int kMaxStackedMounts = 64;
// Every volume's tmpfs has exactly this many inodes: room for what it holds
// (the root directory and curve.cert) and an unusual count, so statfs's
// f_files tells the driver's own mounts from others without reading the
// node's mount table on every call (docs/internals/security.md).
constexpr uint64_t kVolumeInodes = 8;

std::string CertPath(const std::string& target) {
  return target + "/" + std::string(common::kCertFileName);
}

// The tmpfs of a volume owned by `owner`: the root directory belongs to the
// owner and only they may list it.
TmpfsSpec VolumeTmpfs(const PublisherOptions& options, const Owner& owner) {
  return {.size_bytes = options.volume_size_bytes,
          .nr_inodes = kVolumeInodes,
          .mode = 0500,
          .uid = owner.uid,
          .gid = owner.gid,
          .noswap = options.noswap,
          .selinux_context = options.selinux_context};
}

}  // namespace

Publisher::Publisher(HostFs& fs, KeyCache& keys, PublisherOptions options)
    : fs_(fs),
      keys_(keys),
      options_(std::move(options)),
      count_(options_.caps) {}

Status Publisher::Publish(const PublishSpec& spec) {
  const auto guard = locks_.Lock(spec.volume_id);
  // First: a publish past a cap derives no key and touches no path.
  auto counted = count_.Reserve(spec.target_path, spec.pod_uid);
  if (!counted) {
    spdlog::warn("volume {} at {} refused: {}", spec.volume_id,
                 spec.target_path, counted.error());
    return Status(StatusCode::RESOURCE_EXHAUSTED, counted.error());
  }
  KeyCache::Lease lease;
  try {
    lease = keys_.Acquire(spec.volume_id, spec.minicluster, spec.key_id);
  } catch (const MissingKeyError& e) {
    // A volume mounted before its key left the Secret stays published:
    // kubelet publishes every mounted volume again after it restarts.
    if (HoldsPublishedVolume(spec)) {
      spdlog::info(
          "volume {} already published at {}; its master key is no longer "
          "on this node, so the mounted cert is kept as it is",
          spec.volume_id, spec.target_path);
      counted->Keep();
      return Status::OK;
    }
    // Retried by kubelet: it succeeds once the Secret volume has the key.
    return Status(StatusCode::FAILED_PRECONDITION, e.what());
  }
  Status status = PublishLocked(spec, *lease.cert);
  if (lease.other_minicluster) {
    keys_.Settle(spec.volume_id, lease, status.ok());
  } else if (!status.ok() && lease.newly_acquired) {
    keys_.Release(spec.volume_id);
  }
  if (status.ok()) counted->Keep();
  return status;
}

Status Publisher::PublishLocked(const PublishSpec& spec,
                                const MiniClusterCert& cert) {
  const std::string& target = spec.target_path;
  switch (fs_.Inspect(target)) {
    case PathKind::kMissing:
      return MakeDirAndMount(spec, cert);
    case PathKind::kDirectory:
      return MountFresh(spec, cert, /*created_dir=*/false);
    case PathKind::kSymlink:
    case PathKind::kOther:
      return Status(StatusCode::FAILED_PRECONDITION,
                    fmt::format("target_path {} exists and is not a directory; "
                                "the driver never follows or replaces it",
                                target));
    case PathKind::kMountRoot:
      return PublishOverMount(spec, cert);
    case PathKind::kUnreadable:
      return RemountDamaged(spec, cert);
  }
  return Status(StatusCode::INTERNAL, "unreachable");
}

Status Publisher::MakeDirAndMount(const PublishSpec& spec,
                                  const MiniClusterCert& cert) {
  const std::string& target = spec.target_path;
  if (Status made = MakeTargetDir(fs_, target); !made.ok()) return made;
  return MountFresh(spec, cert, /*created_dir=*/true);
}

Status Publisher::PublishOverMount(const PublishSpec& spec,
                                   const MiniClusterCert& cert) {
  const std::string& target = spec.target_path;
  switch (CheckPublished(target, spec, cert)) {
    case TargetVerdict::kHealthy:
      spdlog::debug("volume {} already published at {}", spec.volume_id,
                    target);
      return Status::OK;
    case TargetVerdict::kIncompatible:
      return Status(
          StatusCode::ALREADY_EXISTS,
          fmt::format("target_path {} is already published with another "
                      "MiniCluster, generation, owner or key; unpublish it "
                      "before publishing volume {} there",
                      target, spec.volume_id));
    case TargetVerdict::kDamaged:
      break;
  }
  spdlog::warn("volume {}: repairing a damaged or half-made mount at {}",
               spec.volume_id, target);
  return RemountDamaged(spec, cert);
}

Status Publisher::RemountDamaged(const PublishSpec& spec,
                                 const MiniClusterCert& cert) {
  const std::string& target = spec.target_path;
  if (Status unmounted = UnmountOwn(target, "the damaged volume");
      !unmounted.ok()) {
    return unmounted;
  }
  if (fs_.Inspect(target) != PathKind::kDirectory) {
    return Status(StatusCode::INTERNAL,
                  fmt::format("target_path {} is not a plain directory "
                              "after unmounting it",
                              target));
  }
  return MountFresh(spec, cert, /*created_dir=*/false);
}

bool Publisher::HoldsPublishedVolume(const PublishSpec& spec) {
  const std::string& target = spec.target_path;
  if (fs_.Inspect(target) != PathKind::kMountRoot) return false;
  auto fs = fs_.StatFs(target);
  if (!fs || !fs->is_tmpfs || !fs->read_only ||
      fs->max_inodes != kVolumeInodes) {
    return false;
  }
  auto file = fs_.ReadFile(CertPath(target), kMaxCertBytes);
  if (!file || !file->regular || file->mode != kCertMode ||
      file->uid != spec.owner.uid || file->gid != spec.owner.gid) {
    return false;
  }
  // Without the key the cert cannot be derived again to compare bytes; the
  // driver's own sealed volume naming this MiniCluster is what it wrote.
  auto parsed = curve::ParseCert(file->content.reveal());
  if (!parsed) return false;
  auto name = parsed->metadata.find("name");
  return name != parsed->metadata.end() &&
         name->second == spec.minicluster.QualifiedName();
}

Publisher::TargetVerdict Publisher::CheckPublished(
    const std::string& target, const PublishSpec& spec,
    const MiniClusterCert& cert) {
  auto fs = fs_.StatFs(target);
  if (!fs || !fs->is_tmpfs || !fs->read_only) return TargetVerdict::kDamaged;
  auto file = fs_.ReadFile(CertPath(target), kMaxCertBytes);
  if (!file || !file->regular) return TargetVerdict::kDamaged;
  const bool same_bytes = file->content == cert.text;
  const bool same_owner =
      file->uid == spec.owner.uid && file->gid == spec.owner.gid;
  if (same_bytes && same_owner && file->mode == kCertMode) {
    return TargetVerdict::kHealthy;
  }
  // A complete, valid cert that is simply not this request's: another
  // publish owns this target. Anything else is damage we may repair.
  if (file->mode == kCertMode && curve::ParseCert(file->content.reveal())) {
    return TargetVerdict::kIncompatible;
  }
  return TargetVerdict::kDamaged;
}

Status Publisher::MountFresh(const PublishSpec& spec,
                             const MiniClusterCert& cert, bool created_dir) {
  const std::string& target = spec.target_path;
  // The volume is made, filled and sealed detached, then attached in one
  // step: a failure (or a kill -9) before the attach leaves nothing at the
  // target but the directory, which is removed if this call made it.
  auto roll_back = [&](Status failure) {
    if (created_dir) {
      if (auto ec = fs_.Remove(target)) {
        spdlog::error("volume {}: rollback could not remove {}: {}",
                      spec.volume_id, target, ec.message());
      }
    }
    return failure;
  };

  auto pending = fs_.MakeTmpfs(VolumeTmpfs(options_, spec.owner));
  if (!pending) {
    return roll_back(
        TargetFailure("making the tmpfs", target, pending.error()));
  }
  if (auto ec = (*pending)->WriteNewFile(std::string(common::kCertFileName),
                                         cert.text.reveal(), kCertMode,
                                         spec.owner.uid, spec.owner.gid)) {
    return roll_back(Status(
        ec == std::errc::no_space_on_device ? StatusCode::RESOURCE_EXHAUSTED
                                            : StatusCode::INTERNAL,
        fmt::format("writing {} at target_path {} failed: {}",
                    common::kCertFileName, target, ec.message())));
  }
  if (auto ec = (*pending)->MakeReadOnly()) {
    return roll_back(TargetFailure("making the tmpfs read-only", target, ec));
  }
  if (auto ec = (*pending)->Attach(target)) {
    return roll_back(TargetFailure("mounting tmpfs", target, ec));
  }
  spdlog::info(
      "published volume {} at {}: minicluster {} public-key {} owner {}:{} "
      "pod {} ({})",
      spec.volume_id, target, spec.minicluster.QualifiedName(), cert.public_z85,
      spec.owner.uid, spec.owner.gid, spec.pod_name, spec.pod_uid);
  return Status::OK;
}

bool Publisher::IsOwnVolume(const std::string& target) {
  auto fs = fs_.StatFs(target);
  return fs && fs->is_tmpfs && fs->max_inodes == kVolumeInodes;
}

Status Publisher::UnmountOwn(const std::string& target, std::string_view why) {
  for (int i = 0; i < kMaxStackedMounts; ++i) {
    const PathKind kind = fs_.Inspect(target);
    if (kind != PathKind::kMountRoot && kind != PathKind::kUnreadable) {
      return Status::OK;
    }
    if (!IsOwnVolume(target)) {
      return Status(
          StatusCode::FAILED_PRECONDITION,
          fmt::format("target_path {} holds a mount that is not a "
                      "curve.minicluster.dev volume; the driver leaves it "
                      "alone (unmount it by hand if it should not be there)",
                      target));
    }
    if (auto ec = fs_.Unmount(target)) {
      // EINVAL: not a mount point after all.
      if (ec == std::errc::invalid_argument) return Status::OK;
      return TargetFailure(fmt::format("unmounting {}", why), target, ec);
    }
  }
  return TargetFailure(fmt::format("unmounting {}", why), target,
                       std::make_error_code(std::errc::too_many_links));
}

Status Publisher::Unpublish(const UnpublishSpec& spec) {
  const auto guard = locks_.Lock(spec.volume_id);
  const std::string& target = spec.target_path;
  if (Status unmounted = UnmountOwn(target, "the volume"); !unmounted.ok()) {
    return unmounted;
  }
  count_.Forget(target);  // no volume of ours is left at the target
  if (auto ec = fs_.Remove(target)) {
    if (ec == std::errc::directory_not_empty) {
      return Status(
          StatusCode::FAILED_PRECONDITION,
          fmt::format("target_path {} is not a mount but holds files the "
                      "driver did not write; not deleting them",
                      target));
    }
    if (ec == std::errc::not_a_directory) {
      return Status(
          StatusCode::FAILED_PRECONDITION,
          fmt::format("target_path {} is not a directory (a file, socket, "
                      "symlink or device the driver did not make); not "
                      "deleting it",
                      target));
    }
    return TargetFailure("removing the directory", target, ec);
  }
  keys_.Release(spec.volume_id);
  spdlog::info("unpublished volume {} at {}", spec.volume_id, target);
  return Status::OK;
}

}  // namespace fcc::driver
