#include "controller/desired_options.h"

#include "common/names.h"

namespace fcc::controller {

std::expected<void, std::string> CheckDesiredOptions(
    const DesiredOptions& opts) {
  if (!common::IsDns1123Subdomain(opts.cluster_domain)) {
    return std::unexpected(
        "--cluster-domain must be the cluster's DNS domain, a DNS-1123 "
        "subdomain (lowercase a-z 0-9 '-' '.', e.g. cluster.local); set it to "
        "kubelet's --cluster-domain");
  }
  if (opts.flux_view.size() > 63 ||
      !common::IsDns1123Subdomain(opts.flux_view)) {
    return std::unexpected(
        "--flux-view must name a Flux view the node driver serves, e.g. " +
        std::string(kDefaultFluxView) +
        " (lowercase a-z 0-9 '-' '.', at most 63 characters)");
  }
  if (!opts.key_id.empty() && !common::IsDns1123Label(opts.key_id)) {
    return std::unexpected(
        "--key-id must be a master key id: a DNS-1123 label (a-z 0-9 '-', at "
        "most 63 characters), the name of <id>.key in the driver's "
        "flux-curve-csi-master-key Secret; leave it empty for the default "
        "key");
  }
  return {};
}

}  // namespace fcc::controller
