#include "controller/controller.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <exception>
#include <thread>
#include <vector>

#include "controller/copied_job.h"
#include "controller/minicluster.h"
#include "kube/object_meta.h"

namespace fcc::controller {

using nlohmann::json;

Controller::Controller(ControllerConfig config, Watches& watches,
                       kube::WorkQueue& queue, Reconciler& reconciler,
                       ReconcileObserver* observer)
    : config_(config),
      watches_(watches),
      queue_(queue),
      reconciler_(reconciler),
      observer_(observer) {
  watches_.miniclusters().AddEventHandler(
      [this](kube::WatchEvent::Type, const json& o) { EnqueueMiniCluster(o); });
  watches_.services().AddEventHandler(
      [this](kube::WatchEvent::Type, const json& o) { EnqueueOwner(o); });
  watches_.network_policies().AddEventHandler(
      [this](kube::WatchEvent::Type, const json& o) { EnqueueOwner(o); });
  watches_.jobs().AddEventHandler(
      [this](kube::WatchEvent::Type, const json& o) { EnqueueJob(o); });
  watches_.pods().AddEventHandler(
      [this](kube::WatchEvent::Type, const json& o) {
        EnqueueMiniClusterOfJob(o);
      });
  watches_.workloads().AddEventHandler(
      [this](kube::WatchEvent::Type, const json& o) {
        EnqueueMiniClusterOfJob(o);
      });
}

void Controller::EnqueueMiniCluster(const json& minicluster) {
  queue_.Add(kube::ObjectKey(minicluster));
}

void Controller::EnqueueOwner(const json& object) {
  std::string owner = kube::ControllerOwnerName(object, kKind);
  // The worker role's Service and NetworkPolicy belong to a copied Job of
  // their name (copied_job.h).
  if (owner.empty() &&
      kube::ObjectMeta(object).has_label(kMultiKueueOriginLabel)) {
    owner = kube::ControllerOwnerName(object, "Job");
  }
  if (owner.empty()) return;
  queue_.Add(kube::ObjectMeta(object).namespace_name() + "/" + owner);
}

void Controller::EnqueueJob(const json& job) {
  if (IsCopiedMiniClusterJob(job)) {
    queue_.Add(kube::ObjectKey(job));
    return;
  }
  EnqueueOwner(job);
}

void Controller::EnqueueMiniClusterOfJob(const json& object) {
  const std::string job = kube::ControllerOwnerName(object, "Job");
  if (job.empty()) return;
  const std::string key = kube::ObjectMeta(object).namespace_name() + "/" + job;
  if (watches_.caches().miniclusters.Get(key)) queue_.Add(key);
}

bool Controller::WaitForCacheSync(common::StopSignal& stop) const {
  // Reconcile only from complete caches: a partial cache would look like
  // missing Jobs and cause duplicate creates.
  while (!stop.stopped() && !watches_.HasSynced())
    stop.WaitFor(std::chrono::milliseconds(100));
  return !stop.stopped();
}

void Controller::Run(common::StopSignal& stop) {
  std::vector<std::thread> workers;
  if (WaitForCacheSync(stop)) {
    spdlog::info("caches synced; starting {} workers", config_.workers);
    for (int i = 0; i < config_.workers; ++i)
      workers.emplace_back([this] { RunWorker(); });
    while (!stop.WaitFor(config_.resync_period)) {
      for (const auto& key : watches_.caches().miniclusters.Keys())
        queue_.Add(key);
    }
  }
  queue_.ShutDown();
  for (auto& worker : workers) worker.join();
}

void Controller::RunWorker() {
  while (ProcessNextItem()) {
  }
}

bool Controller::ProcessNextItem() {
  const auto key = queue_.Get();
  if (!key) return false;
  if (observer_ != nullptr) observer_->WorkerStarted();
  const auto start = std::chrono::steady_clock::now();
  const ReconcileResult result = SyncHandler(*key);
  if (observer_ != nullptr) {
    const std::chrono::duration<double> took =
        std::chrono::steady_clock::now() - start;
    observer_->ObserveReconcile(result, took.count());
    observer_->WorkerFinished();
  }
  if (result.retry()) {
    const auto delay = queue_.AddRateLimited(*key);
    spdlog::info("minicluster {}: retrying in {} ms ({}: {})", *key,
                 delay.count(), RetryReasonName(result.reason), result.detail);
  } else {
    queue_.Forget(*key);
    if (result.after) queue_.AddAfter(*key, *result.after);
  }
  queue_.Done(*key);
  return true;
}

// The boundary of a reconcile: an exception (an object of an unexpected
// shape, say) retries the key instead of ending the worker.
ReconcileResult Controller::SyncHandler(const std::string& key) {
  try {
    return reconciler_.Reconcile(key);
  } catch (const std::exception& e) {
    spdlog::error("minicluster {}: reconcile failed: {}", key, e.what());
    return ReconcileResult::Retry(RetryReason::kUnexpectedError, e.what());
  }
}

}  // namespace fcc::controller
