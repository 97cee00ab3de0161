// Publish and unpublish of view volumes: a read-only, nosuid, nodev bind of
// the node's copy of a Flux view (view/catalog.h). Nothing is written and
// nothing secret is involved; the mount table is the only state, as for certs.
#pragma once

#include <grpcpp/support/status.h>

#include <expected>
#include <mutex>
#include <string>
#include <string_view>

#include "driver/host_fs.h"
#include "driver/view/binder.h"
#include "driver/view/catalog.h"
#include "driver/volume_count.h"
#include "driver/volume_locks.h"
#include "driver/volume_request.h"

namespace fcc::driver {

// How a view bind is made read-only, nosuid and nodev in every mount
// namespace it propagates to (kubelet's among them: the pods directory is
// shared), not only in the driver's.
enum class ViewBindApi {
  // A detached clone sealed before it is attached (open_tree,
  // mount_setattr, move_mount; Linux 5.12+).
  kDetached,
  // mount(2) from a staging bind of the copy that the driver sealed once in
  // a private directory of its own: a bind clones its source's per-mount
  // flags, so every copy of it is sealed from the start. For kernels
  // without mount_setattr, and with --mount-api=mount.
  kStaged,
};

// kDetached if this kernel has mount_setattr, else kStaged.
ViewBindApi DetectViewBindApi();

struct ViewPublisherOptions {
  ViewBindApi api = ViewBindApi::kDetached;
  // kStaged: where the sealed staging binds live (--view-staging-dir). The
  // driver makes it a private mount of its own, so nothing made there
  // propagates anywhere.
  std::string staging_dir;
};

class ViewPublisher {
 public:
  // `count` is the cert publisher's: views and certs share the node's cap.
  ViewPublisher(HostFs& fs, ViewBinder& binder, const ViewCatalog& views,
                VolumeCount& count, ViewPublisherOptions options = {})
      : fs_(fs),
        binder_(binder),
        views_(views),
        count_(count),
        options_(std::move(options)) {}

  // Idempotent: a copy of the view (the one served, or an older one a
  // running pod has since an upgrade) already bound read-only at the target
  // is OK; a bind that lost its flags is repaired; another mount there is
  // ALREADY_EXISTS. An unserved view is NOT_FOUND, naming what the node
  // serves; a pod's second view, or one past the node's cap, is
  // RESOURCE_EXHAUSTED. A failure leaves nothing behind.
  grpc::Status Publish(const ViewPublishSpec& spec);
  // Unmounts every view bind stacked at the target (served views or older
  // copies), leaving the directory and anything else there to the cert
  // publisher's Unpublish, which every unpublish ends with.
  grpc::Status UnmountViews(const UnpublishSpec& spec);
  // Counts the view binds an earlier driver process left at kubelet's
  // targets: once at start, before serving. Returns how many.
  std::expected<size_t, std::string> AdoptMounted(std::string_view kubelet_dir);

  const ViewCatalog& views() const { return views_; }

 private:
  // The view bound at `target`, if the mount at its root is one.
  bool HoldsView(const std::string& target);
  // Reserves a count, makes the directory if `missing`, binds.
  grpc::Status BindNew(const ViewPublishSpec& spec, const View& view,
                       bool missing);
  // The target is a mount root: a copy of this view, or someone else's.
  grpc::Status CheckBound(const ViewPublishSpec& spec);
  grpc::Status Bind(const ViewPublishSpec& spec, const View& view,
                    bool created_dir);
  // kStaged: the sealed staging bind of `view`'s copy, made once.
  std::expected<std::string, std::error_code> StagedCopy(const View& view);

  HostFs& fs_;
  ViewBinder& binder_;
  const ViewCatalog& views_;
  VolumeCount& count_;
  const ViewPublisherOptions options_;
  VolumeLocks locks_;
  std::mutex staging_mu_;  // making a staging bind
  bool staging_private_ = false;
};

// NOT_FOUND for a view `catalog` does not serve: what it serves and the fix;
// FAILED_PRECONDITION for one it could not install, naming the cause.
grpc::Status ViewNotServed(std::string_view view, const ViewCatalog& catalog);

}  // namespace fcc::driver
