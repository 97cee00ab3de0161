// The names of a MiniCluster's objects and of its brokers' hosts. Pure;
// below both the broker config and the objects that use them.
#pragma once

#include <string>
#include <vector>

#include "controller/minicluster.h"

namespace fcc::controller {

std::string ServiceName(const MiniCluster& mc);
std::string JobName(const MiniCluster& mc);

// The hostlist of all brokers, e.g. "demo-[0-3]" (pods of an Indexed Job
// are named <job>-<index> by the Job controller).
std::string BrokerHostlist(const MiniCluster& mc);
// The hostlist of some of them: <job>-[0-1,4], from ascending indexes.
std::string HostlistOf(const MiniCluster& mc, const std::vector<int>& indexes);

}  // namespace fcc::controller
