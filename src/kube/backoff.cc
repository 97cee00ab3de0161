#include "kube/backoff.h"

#include <algorithm>
#include <random>

namespace fcc::kube {

std::chrono::milliseconds Backoff::Next() {
  // Full jitter keeps many replicas/informers from retrying in lockstep.
  static thread_local std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<long> jitter(next_.count() / 2, next_.count());
  const std::chrono::milliseconds delay(jitter(rng));
  next_ = std::min(max_, next_ * 2);
  return delay;
}

}  // namespace fcc::kube
