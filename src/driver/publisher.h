// Publish and unpublish: one small read-only tmpfs per volume holding
// curve.cert. The kernel mount table and the tmpfs contents are the only
// state, so a restarted driver picks up where the old one stopped.
#pragma once

#include <grpcpp/support/status.h>

#include <cstdint>
#include <string>
#include <vector>

#include "driver/host_fs.h"
#include "driver/key_cache.h"
#include "driver/volume_count.h"
#include "driver/volume_locks.h"
#include "driver/volume_request.h"

namespace fcc::driver {

struct PublisherOptions {
  // tmpfs size= limit. A cert is ~250 bytes; the kernel rounds up to pages.
  uint64_t volume_size_bytes = uint64_t{16} * 1024;
  // See TmpfsSpec; serve turns noswap on where the kernel has it.
  bool noswap = false;
  std::string selinux_context;
  // At most this many volumes per pod and on the node; a publish past one
  // is RESOURCE_EXHAUSTED before anything is mounted.
  VolumeCaps caps;
};

class Publisher {
 public:
  Publisher(HostFs& fs, KeyCache& keys, PublisherOptions options = {});

  // Idempotent: a healthy publish of the same volume returns OK and adds no
  // mount; a damaged one is repaired; a target holding another MiniCluster's
  // or owner's cert is ALREADY_EXISTS. A failure leaves nothing behind.
  grpc::Status Publish(const PublishSpec& spec);
  // Idempotent and tolerant: a missing target, a plain directory, or the
  // driver's own volumes (stacked or damaged) all end with the path gone and
  // OK. A mount the driver did not make, or anything but a directory, is
  // FAILED_PRECONDITION and left alone.
  grpc::Status Unpublish(const UnpublishSpec& spec);

  // Counts the driver's volumes already mounted (by an earlier process):
  // called once at start, before serving (ScanDriverVolumes).
  void AdoptMounted(const std::vector<MountedVolume>& volumes) {
    count_.Adopt(volumes);
  }
  const VolumeCaps& caps() const { return count_.caps(); }
  VolumeCount::Stats CountStats() const { return count_.GetStats(); }
  // The count view volumes share (ViewPublisher).
  VolumeCount& count() { return count_; }

 private:
  enum class TargetVerdict { kHealthy, kIncompatible, kDamaged };
  TargetVerdict CheckPublished(const std::string& target,
                               const PublishSpec& spec,
                               const MiniClusterCert& cert);
  // The target is the driver's sealed volume holding a cert of this
  // MiniCluster and owner: what an earlier publish of it made, checked
  // without the master key (which may be gone).
  bool HoldsPublishedVolume(const PublishSpec& spec);
  grpc::Status PublishLocked(const PublishSpec& spec,
                             const MiniClusterCert& cert);
  // The target is missing: make it, then mount.
  grpc::Status MakeDirAndMount(const PublishSpec& spec,
                               const MiniClusterCert& cert);
  // The target is a mount root: ours and healthy, someone else's, or damage.
  grpc::Status PublishOverMount(const PublishSpec& spec,
                                const MiniClusterCert& cert);
  // Unmounts the driver's own volume at the target, then mounts afresh.
  grpc::Status RemountDamaged(const PublishSpec& spec,
                              const MiniClusterCert& cert);
  grpc::Status MountFresh(const PublishSpec& spec, const MiniClusterCert& cert,
                          bool created_dir);
  // Unmounts every mount stacked at `target`, all of which must be the
  // driver's own; OK once none is left.
  grpc::Status UnmountOwn(const std::string& target, std::string_view why);
  bool IsOwnVolume(const std::string& target);

  HostFs& fs_;
  KeyCache& keys_;
  const PublisherOptions options_;
  VolumeLocks locks_;
  // Changed only with the volume's lock held, so a volume's count follows
  // its publishes and unpublishes in order.
  VolumeCount count_;
};

}  // namespace fcc::driver
