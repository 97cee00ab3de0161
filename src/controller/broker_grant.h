// What one broker's pod gives Flux: whole cores and GPUs from its
// resources, bounded by what a node has. Pure; below the parser (which
// refuses more) and the broker config (which declares it).
#pragma once

#include <array>
#include <nlohmann/json.hpp>

namespace fcc::controller {

// The most cores or GPUs one broker is given: about what the largest nodes
// have (768 CPUs, 16 GPUs), since Fluxion on rank 0 models each one of
// every rank. The spec refuses a larger quantity (minicluster.h);
// BrokerResourcesOf clamps to it.
inline constexpr int kMaxBrokerCores = 1024;
inline constexpr int kMaxBrokerGpus = 64;
// The extended resources that name GPUs.
inline constexpr std::array<const char*, 2> kGpuResources = {"nvidia.com/gpu",
                                                             "amd.com/gpu"};
// A broker's share as Flux sees it: whole cores from the container's CPU
// limit, else its request (rounded up), and GPUs from the extended
// resources that name them, each a Kubernetes quantity in any form
// (quantity.h). The limit: what the broker's tasks may use, where a lower
// request only sets what the node guarantees (a small node's MiniClusters
// oversubscribe so). cores 0: no CPU given, hwloc's view stays.
struct BrokerResources {
  int cores = 0;
  int gpus = 0;
};
BrokerResources BrokerResourcesOf(const nlohmann::json& resources);

}  // namespace fcc::controller
