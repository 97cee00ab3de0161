// A de-duplicating keyed work queue (level-triggered): a key waits at most
// once, a key being processed is never handed to a second worker, and a
// key added while processed is processed again afterwards. Failed keys
// come back after a per-key exponential delay.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

namespace fcc::kube {

// Hears what a WorkQueue does, for client-go's workqueue metrics.
class WorkQueueObserver {
 public:
  virtual ~WorkQueueObserver() = default;
  virtual void Added() = 0;                 // a key went into the queue
  virtual void Waited(double seconds) = 0;  // from Add to Get
  virtual void Worked(double seconds) = 0;  // from Get to Done
  virtual void Retried() = 0;               // AddRateLimited
};

class WorkQueue {
 public:
  using Clock = std::chrono::steady_clock;

  WorkQueue(
      std::chrono::milliseconds base_delay = std::chrono::milliseconds(100),
      std::chrono::milliseconds max_delay = std::chrono::minutes(5))
      : base_delay_(base_delay), max_delay_(max_delay) {}

  void Add(const std::string& key);
  void AddAfter(const std::string& key, std::chrono::milliseconds delay);
  // Re-adds after base_delay * 2^failures (capped); returns the delay.
  std::chrono::milliseconds AddRateLimited(const std::string& key);
  // Clears the failure count after a success.
  void Forget(const std::string& key);
  // Blocks for the next key; nullopt once ShutDown() was called.
  std::optional<std::string> Get();
  // Must follow every Get() that returned a key.
  void Done(const std::string& key);
  void ShutDown();
  size_t Len() const;

  // Set before the queue is used; may be null.
  void set_observer(WorkQueueObserver* observer) { observer_ = observer; }
  struct InProgress {
    double unfinished_seconds = 0;  // summed over keys being processed
    double longest_seconds = 0;     // the key processed the longest
  };
  InProgress InProgressWork() const;

 private:
  void AddLocked(const std::string& key);
  void Enqueue(const std::string& key);  // into queue_, mu_ held

  const std::chrono::milliseconds base_delay_, max_delay_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::set<std::string> dirty_;  // waiting in queue_ (or to re-queue)
  // Handed out, Done() not yet called: since when.
  std::map<std::string, Clock::time_point> processing_;
  std::map<std::string, Clock::time_point> queued_at_;  // in queue_ since
  std::multimap<Clock::time_point, std::string> delayed_;
  std::map<std::string, int> failures_;
  bool shutting_down_ = false;
  WorkQueueObserver* observer_ = nullptr;
};

}  // namespace fcc::kube
