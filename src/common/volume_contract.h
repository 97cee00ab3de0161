// The contract between the two binaries: what the controller writes into
// every MiniCluster's CSI volume and what the node driver accepts and
// writes. One definition for both sides, so a rename on one side is a
// rename on the other; test/contract holds them together.
#pragma once

#include <array>
#include <string_view>

namespace fcc::common {

// The CSI driver name: the CSIDriver object, the volume's `driver:`, the
// plugin's registration, and the source of every tmpfs the driver mounts
// (which is how it knows its own mounts: `findmnt -t tmpfs -S
// curve.minicluster.dev`). A C string, since mount(2) and fsconfig take it.
inline constexpr char kDriverName[] = "curve.minicluster.dev";

// volumes[].csi.volumeAttributes keys a pod author (the controller) sets.
inline constexpr std::string_view kAttrMiniCluster = "minicluster";
inline constexpr std::string_view kAttrGeneration = "generation";
inline constexpr std::string_view kAttrOwner = "owner";
// The master key the cert is derived from: a DNS-1123 label naming
// <id>.key in the master key Secret. Absent: the driver's default key, whose
// certs are those of every release before key rotation.
inline constexpr std::string_view kAttrKeyId = "key-id";
// All of them, in the order error messages list them.
inline constexpr std::array<std::string_view, 4> kVolumeAttributeKeys = {
    kAttrMiniCluster, kAttrGeneration, kAttrOwner, kAttrKeyId};

// A view volume: a read-only bind of a self-contained Flux install that the
// driver serves ("Bring your own image", docs). Its volumeAttributes hold
// this one key and nothing else, naming the view (e.g. flux-core-0.88.0);
// a volume that names a MiniCluster is a cert volume, never a view.
inline constexpr std::string_view kAttrView = "view";
// Where a view is mounted in a pod: flux-core's compiled-in prefix.
inline constexpr std::string_view kViewMountPath = "/opt/flux";
// The view's manifest, relative to its root: {"name", "digest", ...}.
inline constexpr std::string_view kViewManifest = "share/flux-view/view.json";

// The one file inside every published volume.
inline constexpr std::string_view kCertFileName = "curve.cert";

// Where the controller mounts the volume in every broker; the broker config's
// `[bootstrap] curve_cert` is kCertMountPath + "/" + kCertFileName.
inline constexpr std::string_view kCertMountPath = "/etc/flux/curve";

}  // namespace fcc::common
