// Kubernetes names, and this project's own: one definition for both
// binaries.
#pragma once

#include <string_view>

namespace fcc::common {

// The CSI driver name: the CSIDriver object, the volume's `driver:`, the
// plugin's registration, and the source of every tmpfs the driver mounts
// (which is how it knows its own mounts: `findmnt -t tmpfs -S
// curve.minicluster.dev`). A C string, since mount(2) and fsconfig take it.
inline constexpr char kDriverName[] = "curve.minicluster.dev";

// RFC 1123 label: namespaces, and a Service's name once it begins with a
// letter (IsDns1035Label).
bool IsDns1123Label(std::string_view name);
// RFC 1123 subdomain: the names of most objects (MiniClusters among them).
bool IsDns1123Subdomain(std::string_view name);
// RFC 1035 label: names that become a Service's name or a hostname.
bool IsDns1035Label(std::string_view name);
// A label or annotation key: "[<DNS-1123 subdomain>/]<name>", the name at
// most 63 alphanumerics, '-', '_' or '.', beginning and ending with an
// alphanumeric.
bool IsQualifiedName(std::string_view key);
// A label value: empty, or at most 63 characters shaped like a key's name.
bool IsLabelValue(std::string_view value);

}  // namespace fcc::common
