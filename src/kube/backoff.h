// Exponential back-off with full jitter and a ceiling.
#pragma once

#include <chrono>

namespace fcc::kube {

class Backoff {
 public:
  Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max)
      : initial_(initial), max_(max), next_(initial) {}
  std::chrono::milliseconds Next();
  // After a success.
  void Reset() { next_ = initial_; }

 private:
  std::chrono::milliseconds initial_, max_, next_;
};

}  // namespace fcc::kube
