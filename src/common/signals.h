// SIGTERM and SIGINT, taken by one waiter rather than by handlers in random
// threads.
#pragma once

#include <expected>
#include <string>
#include <thread>

#include "common/stop_signal.h"
#include "common/unique_fd.h"

namespace fcc::common {

class SignalWaiter {
 public:
  // Blocks SIGTERM and SIGINT in the calling thread. Create it in main before
  // any thread starts, so every thread inherits the mask and the signals
  // reach Wait() alone.
  static std::expected<SignalWaiter, std::string> Create();

  // Blocks until SIGTERM/SIGINT (returns its number) or Cancel() (returns 0).
  int Wait();
  // Wakes Wait() when the process stops for another reason. Thread-safe.
  void Cancel();

 private:
  SignalWaiter(UniqueFd signal_fd, UniqueFd cancel_fd)
      : signal_fd_(std::move(signal_fd)), cancel_fd_(std::move(cancel_fd)) {}
  UniqueFd signal_fd_;
  UniqueFd cancel_fd_;
};

// Stops `stop` on SIGTERM/SIGINT, from a thread of its own; when the stop
// comes from elsewhere, destruction ends that thread too.
class StopOnSignal {
 public:
  StopOnSignal(SignalWaiter waiter, StopSignal& stop);
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

 private:
  SignalWaiter waiter_;
  StopSignal& stop_;
  std::thread thread_;
};

}  // namespace fcc::common
