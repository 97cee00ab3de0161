// `minicluster-controller render`: the Service, NetworkPolicy and Job the
// reconciler would create for a MiniCluster manifest, as a YAML stream.
#pragma once

#include <expected>
#include <string>

#include "controller/desired.h"

namespace fcc::controller {

// Placeholder for metadata.uid, which only the API server assigns; the CSI
// `generation` attribute shows it in rendered output.
inline constexpr char kRenderUidPlaceholder[] =
    "00000000-0000-0000-0000-000000000000";

// Parses `manifest` (YAML or JSON, one MiniCluster), defaults namespace to
// "default" and uid to the placeholder, validates it and returns
// "---\n<Service>---\n<NetworkPolicy>---\n<Job>", or the error naming the
// fields to fix.
std::expected<std::string, std::string> RenderMiniCluster(
    const std::string& manifest, const DesiredOptions& options);

}  // namespace fcc::controller
