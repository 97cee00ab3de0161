#include "controller/broker_grant.h"

#include <algorithm>
#include <cstdint>

#include "controller/quantity.h"
#include "kube/object_meta.h"

namespace fcc::controller {

using nlohmann::json;

namespace {

// A quantity as a count of `scale`-ths, rounded up (3: CPU millicores, 0:
// GPUs); 0 for one that is not a quantity or negative, `max` for one
// larger. The spec check (minicluster.cc) refuses those; a Job made before
// it existed could still hold one.
int64_t ScaledCount(const json& value, int scale, int64_t max) {
  const auto quantity = ParseJsonQuantity(value);
  if (!quantity || quantity->negative) return 0;
  return ScaledValueAtMost(*quantity, scale, max).value_or(max);
}

}  // namespace

BrokerResources BrokerResourcesOf(const json& resources) {
  BrokerResources r;
  const json& limits = kube::FieldAt(resources, "limits");
  const json& requests = kube::FieldAt(resources, "requests");
  const json& cpu =
      limits.contains("cpu") ? limits["cpu"] : kube::FieldAt(requests, "cpu");
  // Whole cores, rounded up: a request of 1500m is 2 Flux cores (at least
  // one), as a job's tasks may use 1.5 CPUs of them.
  if (!cpu.is_null()) {
    const int64_t millis = ScaledCount(cpu, 3, int64_t{kMaxBrokerCores} * 1000);
    r.cores = static_cast<int>((millis + 999) / 1000);
  }
  for (const char* gpu : kGpuResources) {
    const json& count = kube::FieldAt(limits, gpu);
    if (count.is_null()) continue;
    r.gpus += static_cast<int>(ScaledCount(count, 0, kMaxBrokerGpus));
  }
  r.gpus = std::min(r.gpus, kMaxBrokerGpus);
  return r;
}

}  // namespace fcc::controller
