// A one-shot stop flag every long-running loop waits on, so SIGTERM ends
// sleeps and back-offs at once instead of after their full delay.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace fcc::common {

class StopSignal {
 public:
  void Stop() {
    {
      std::lock_guard lock(mu_);
      stopped_.store(true);
    }
    cv_.notify_all();
  }
  bool stopped() const { return stopped_.load(); }
  // Sleeps for `d` or until Stop(); returns true if stopped.
  template <typename Rep, typename Period>
  bool WaitFor(std::chrono::duration<Rep, Period> d) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, d, [this] { return stopped_.load(); });
  }
  // For libcurl progress callbacks that poll.
  const std::atomic<bool>& flag() const { return stopped_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stopped_{false};
};

}  // namespace fcc::common
