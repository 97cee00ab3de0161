// Publish and unpublish of view volumes: a read-only, nosuid, nodev bind of
// the node's copy of a Flux view (views.h). Nothing is written and nothing
// secret is involved; the mount table is the only state, as for certs.
#pragma once

#include <grpcpp/support/status.h>

#include <string>

#include "driver/host_fs.h"
#include "driver/views.h"
#include "driver/volume_locks.h"
#include "driver/volume_request.h"

namespace fcc::driver {

class ViewPublisher {
 public:
  ViewPublisher(HostFs& fs, const ViewCatalog& views)
      : fs_(fs), views_(views) {}

  // Idempotent: the view already bound read-only at the target is OK; a bind
  // that lost its flags is repaired; another mount there is ALREADY_EXISTS.
  // An unserved view is NOT_FOUND, naming what the node serves. A failure
  // leaves nothing behind.
  grpc::Status Publish(const ViewPublishSpec& spec);
  // Unmounts every view bind stacked at the target (served views or older
  // copies), leaving the directory and anything else there to the cert
  // publisher's Unpublish, which every unpublish ends with.
  grpc::Status UnmountViews(const UnpublishSpec& spec);

  const ViewCatalog& views() const { return views_; }

 private:
  // The view bound at `target`, if the mount at its root is one.
  bool HoldsView(const std::string& target);
  grpc::Status Bind(const ViewPublishSpec& spec, const View& view,
                    bool created_dir);

  HostFs& fs_;
  const ViewCatalog& views_;
  VolumeLocks locks_;
};

// NOT_FOUND for a view `catalog` does not serve: what it serves and the fix;
// FAILED_PRECONDITION for one it could not install, naming the cause.
grpc::Status ViewNotServed(std::string_view view, const ViewCatalog& catalog);

// The kernel side: a clone of `source` made read-only, nosuid and nodev
// while detached, then attached at `target` (open_tree, mount_setattr,
// move_mount; Linux 5.12+), so every mount namespace it propagates to has
// those flags. Older kernels: mount(2) and a remount, which seals only this
// namespace's copy; a failed remount undoes the bind.
std::error_code BindReadOnly(const std::string& source,
                             const std::string& target);
// Whether the mount at `path` is read-only, nosuid and nodev.
std::expected<bool, std::error_code> IsSealedBind(const std::string& path);
std::error_code SealBind(const std::string& target);

}  // namespace fcc::driver
