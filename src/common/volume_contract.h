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
// driver serves ("Bring your own image", docs), named by this key (e.g.
// flux-core-0.88.0).
inline constexpr std::string_view kAttrView = "view";
// The keys kubelet adds to a volume's context (pod info, ephemeral); a pod
// author's volumeAttributes may hold them too, and kubelet overwrites them.
inline constexpr std::string_view kKubeletAttributePrefix =
    "csi.storage.k8s.io/";

// The one rule that tells a view volume from a cert volume, for the driver
// and the admission policies alike: its volumeAttributes, leaving out
// kubelet's keys, are `view` alone. Anything else is a cert volume (and a
// cert volume with `view` among its keys is refused as one).
template <typename Keys>
bool IsViewVolume(const Keys& keys) {
  bool view = false;
  for (const auto& key : keys) {
    const std::string_view k(key);
    if (k.starts_with(kKubeletAttributePrefix)) continue;
    if (k != kAttrView) return false;
    view = true;
  }
  return view;
}
// The same rule in CEL over a pod spec's volume `v`: every policy in deploy/
// and the chart that tells views from certs says exactly this
// (test/contract holds them to it).
inline constexpr std::string_view kViewVolumeCel =
    "v.csi.?volumeAttributes.orValue({}).filter(k, "
    "!k.startsWith('csi.storage.k8s.io/')) == ['view']";
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
