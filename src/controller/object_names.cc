#include "controller/object_names.h"

namespace fcc::controller {

std::string ServiceName(const MiniCluster& mc) { return mc.name; }
std::string JobName(const MiniCluster& mc) { return mc.name; }

std::string BrokerHostlist(const MiniCluster& mc) {
  const std::string job = JobName(mc);
  if (mc.spec.size <= 1) return job + "-0";
  return job + "-[0-" + std::to_string(mc.spec.size - 1) + "]";
}

}  // namespace fcc::controller
