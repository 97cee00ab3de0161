// The MiniCluster controller, shaped like Kubernetes' sample-controller:
// event handlers turn changes seen by the watches into MiniCluster keys on
// a rate-limited queue; workers take keys off the queue and hand each to
// the sync handler (the Reconciler), re-queueing with back-off what asks
// for a retry.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "common/stop_signal.h"
#include "controller/reconciler.h"
#include "controller/watches.h"
#include "kube/work_queue.h"

namespace fcc::controller {

struct ControllerConfig {
  int workers = 2;
  // Level-triggered safety net: every MiniCluster is revisited this often.
  std::chrono::minutes resync_period{10};
};

class Controller {
 public:
  // Registers the event handlers on `watches`, so it must run before
  // watches.Start. `observer` (may be null) hears of every reconcile.
  Controller(ControllerConfig config, Watches& watches, kube::WorkQueue& queue,
             Reconciler& reconciler, ReconcileObserver* observer = nullptr);

  // Waits for the caches to sync, then runs the workers and the resync
  // until `stop`; shuts the queue down and joins the workers on the way out.
  void Run(common::StopSignal& stop);

 private:
  void EnqueueMiniCluster(const nlohmann::json& minicluster);
  // A Service, NetworkPolicy or Job: its controller owner, the MiniCluster
  // (or, for the worker role's objects, the copied Job).
  void EnqueueOwner(const nlohmann::json& object);
  // A Job MultiKueue copied here (copied_job.h) is its own key.
  void EnqueueJob(const nlohmann::json& job);
  // A Workload or broker pod: the MiniCluster of the Job that owns it (the
  // Job has the MiniCluster's name), if there is one (not a MultiKueue
  // worker's copied Job).
  void EnqueueMiniClusterOfJob(const nlohmann::json& object);

  // False if `stop` came first.
  bool WaitForCacheSync(common::StopSignal& stop) const;
  void RunWorker();
  // Takes one key and syncs it; false once the queue is shut down.
  bool ProcessNextItem();
  ReconcileResult SyncHandler(const std::string& key);

  const ControllerConfig config_;
  Watches& watches_;
  kube::WorkQueue& queue_;
  Reconciler& reconciler_;
  ReconcileObserver* observer_;
};

}  // namespace fcc::controller
