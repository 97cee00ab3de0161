#include "controller/object_names.h"

namespace fcc::controller {

std::string ServiceName(const MiniCluster& mc) { return mc.name; }
std::string JobName(const MiniCluster& mc) { return mc.name; }

std::string BrokerHostlist(const MiniCluster& mc) {
  const std::string job = JobName(mc);
  if (mc.spec.size <= 1) return job + "-0";
  return job + "-[0-" + std::to_string(mc.spec.size - 1) + "]";
}

std::string HostlistOf(const MiniCluster& mc, const std::vector<int>& indexes) {
  std::string ranges;
  for (size_t i = 0; i < indexes.size();) {
    size_t j = i;
    while (j + 1 < indexes.size() && indexes[j + 1] == indexes[j] + 1) ++j;
    if (!ranges.empty()) ranges += ",";
    ranges += std::to_string(indexes[i]);
    if (j > i) ranges += "-" + std::to_string(indexes[j]);
    i = j + 1;
  }
  return JobName(mc) + "-[" + ranges + "]";
}

}  // namespace fcc::controller
