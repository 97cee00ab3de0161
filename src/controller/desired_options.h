// Settings of the whole controller (its flags), which every MiniCluster's
// objects are made with. Below everything that renders them.
#pragma once

#include <expected>
#include <string>

#include "common/volume_contract.h"
#include "controller/minicluster.h"

namespace fcc::controller {

inline constexpr char kDefaultFluxView[] = "flux-core-0.88.0";

// Settings of the whole controller (flags), not of one MiniCluster.
struct DesiredOptions {
  std::string cluster_domain = "cluster.local";
  // Where the CSI volume (and so curve.cert) is mounted in every pod.
  std::string curve_mount_path{common::kCertMountPath};
  // A writable emptyDir the start script writes the broker config into.
  std::string config_mount_path = kConfigMountPath;
  // A writable emptyDir over /run. The start script makes run/flux in it as
  // the broker's user (flux-core refuses a socket directory its instance
  // owner does not own) and the broker listens on run/flux/local: where the
  // flux CLI looks with no FLUX_URI at all (the system instance's default),
  // so `kubectl exec POD -- flux ...` just works.
  std::string run_mount_path = kRunMountPath;
  // The Flux view of MiniClusters that name none (--flux-view), stamped
  // into each Job when it is created, like the key id.
  std::string flux_view = kDefaultFluxView;
  // The master key new MiniClusters' certs come from (--key-id), stamped
  // into each Job as volumeAttributes.key-id when it is created; empty: no
  // attribute, the driver's default key. A Job keeps its key for life.
  std::string key_id;
  // --multikueue-worker: make the Service and NetworkPolicy of the Jobs
  // that Kueue's MultiKueue copies here from a manager (copied_job.h).
  bool multikueue_worker = false;
};

// Checks options that reach every broker's start script and config: the
// error names the flag and the fix (a --cluster-domain with a newline or a
// quote would run as a shell line in every tenant's pod).
std::expected<void, std::string> CheckDesiredOptions(
    const DesiredOptions& opts);

}  // namespace fcc::controller
