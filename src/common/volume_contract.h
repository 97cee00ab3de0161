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
// All of them, in the order error messages list them.
inline constexpr std::array<std::string_view, 3> kVolumeAttributeKeys = {
    kAttrMiniCluster, kAttrGeneration, kAttrOwner};

// The one file inside every published volume.
inline constexpr std::string_view kCertFileName = "curve.cert";

// Where the controller mounts the volume in every broker; the broker config's
// `[bootstrap] curve_cert` is kCertMountPath + "/" + kCertFileName.
inline constexpr std::string_view kCertMountPath = "/etc/flux/curve";

}  // namespace fcc::common
