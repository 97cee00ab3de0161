#include "kube/work_queue.h"

#include <algorithm>

namespace fcc::kube {
namespace {

double Seconds(WorkQueue::Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

void WorkQueue::AddLocked(const std::string& key) {
  if (shutting_down_ || dirty_.count(key)) return;
  dirty_.insert(key);
  if (processing_.count(key)) return;  // Done() re-queues it
  Enqueue(key);
}

void WorkQueue::Enqueue(const std::string& key) {
  queue_.push_back(key);
  queued_at_[key] = Clock::now();
  if (observer_ != nullptr) observer_->Added();
  cv_.notify_one();
}

void WorkQueue::Add(const std::string& key) {
  std::lock_guard lock(mu_);
  AddLocked(key);
}

void WorkQueue::AddAfter(const std::string& key,
                         std::chrono::milliseconds delay) {
  if (delay <= std::chrono::milliseconds::zero()) return Add(key);
  std::lock_guard lock(mu_);
  if (shutting_down_) return;
  delayed_.emplace(Clock::now() + delay, key);
  cv_.notify_all();  // a waiting worker may need an earlier wake-up
}

std::chrono::milliseconds WorkQueue::AddRateLimited(const std::string& key) {
  std::chrono::milliseconds delay;
  {
    std::lock_guard lock(mu_);
    if (observer_ != nullptr) observer_->Retried();
    const int n = std::min(failures_[key]++, 30);
    delay = std::min(max_delay_,
                     std::chrono::duration_cast<std::chrono::milliseconds>(
                         base_delay_ * (int64_t{1} << std::min(n, 20))));
  }
  AddAfter(key, delay);
  return delay;
}

void WorkQueue::Forget(const std::string& key) {
  std::lock_guard lock(mu_);
  failures_.erase(key);
}

std::optional<std::string> WorkQueue::Get() {
  std::unique_lock lock(mu_);
  while (true) {
    if (shutting_down_) return std::nullopt;
    const auto now = Clock::now();
    while (!delayed_.empty() && delayed_.begin()->first <= now) {
      const std::string key = delayed_.begin()->second;
      delayed_.erase(delayed_.begin());
      AddLocked(key);
    }
    if (!queue_.empty()) {
      std::string key = std::move(queue_.front());
      queue_.pop_front();
      dirty_.erase(key);
      processing_[key] = now;
      if (auto it = queued_at_.find(key); it != queued_at_.end()) {
        if (observer_ != nullptr) observer_->Waited(Seconds(now - it->second));
        queued_at_.erase(it);
      }
      return key;
    }
    if (delayed_.empty()) {
      cv_.wait(lock);
    } else {
      cv_.wait_until(lock, delayed_.begin()->first);
    }
  }
}

void WorkQueue::Done(const std::string& key) {
  std::lock_guard lock(mu_);
  if (auto it = processing_.find(key); it != processing_.end()) {
    if (observer_ != nullptr)
      observer_->Worked(Seconds(Clock::now() - it->second));
    processing_.erase(it);
  }
  if (dirty_.count(key) && !shutting_down_) Enqueue(key);
}

void WorkQueue::ShutDown() {
  std::lock_guard lock(mu_);
  shutting_down_ = true;
  cv_.notify_all();
}

WorkQueue::InProgress WorkQueue::InProgressWork() const {
  std::lock_guard lock(mu_);
  const auto now = Clock::now();
  InProgress work;
  for (const auto& [key, since] : processing_) {
    const double s = Seconds(now - since);
    work.unfinished_seconds += s;
    work.longest_seconds = std::max(work.longest_seconds, s);
  }
  return work;
}

size_t WorkQueue::Len() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

}  // namespace fcc::kube
