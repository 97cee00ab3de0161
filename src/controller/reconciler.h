// Reconciles one MiniCluster: observe (the caches) -> plan (plan.h, pure)
// -> execute (the API). The result says whether to retry and why.
#pragma once

#include <chrono>
#include <expected>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "controller/copied_job.h"
#include "controller/events.h"
#include "controller/plan.h"
#include "kube/kube_client.h"
#include "kube/object_store.h"

namespace fcc::controller {

// TrimForCache, and of a Job also spec.template: the reconciler and the
// status read a Job's metadata, spec.suspend and status only, and the pod
// template (the start script and broker config included) is most of a
// Job. It is set once at creation and never compared (plan.h).
void TrimJobForCache(nlohmann::json& job);

// The caches the reconciler reads. `workloads` is indexed by
// JobUidsOfWorkload (status.h).
struct Caches {
  const kube::ObjectStore& miniclusters;
  const kube::ObjectStore& services;
  const kube::ObjectStore& jobs;
  const kube::ObjectStore& workloads;
  const kube::ObjectStore& network_policies;
  const kube::ObjectStore& pods;  // indexed by their Job's uid
};

// Why a key goes back to the queue with back-off.
enum class RetryReason {
  kNone,
  kWriteFailed,              // a create or apply failed
  kMiniClusterLookupFailed,  // the whole MiniCluster could not be read
  kJobLookupFailed,          // the create met 409 and the Job could not be read
  kJobNameTaken,      // a Job of that name that the MiniCluster does not own
  kServiceNameTaken,  // likewise a Service
  kUnexpectedError,   // the reconcile threw
};
std::string RetryReasonName(RetryReason reason);

struct ReconcileResult {
  RetryReason reason = RetryReason::kNone;
  std::string detail;  // what failed, for the log
  // Done, but look again then (a finished MiniCluster's TTL runs out).
  std::optional<std::chrono::seconds> after;

  static ReconcileResult Done() { return {}; }
  static ReconcileResult Retry(RetryReason reason, std::string detail) {
    return {reason, std::move(detail), std::nullopt};
  }
  bool retry() const { return reason != RetryReason::kNone; }
  // Keeps the first reason to retry.
  void Merge(ReconcileResult other) {
    if (!retry()) *this = std::move(other);
  }
};

// Hears of every reconcile, for controller-runtime's metrics (the
// controller's Metrics implements it, as it does the kube runtime's
// observers).
class ReconcileObserver {
 public:
  virtual ~ReconcileObserver() = default;
  virtual void WorkerStarted() = 0;
  virtual void ObserveReconcile(const ReconcileResult& result,
                                double seconds) = 0;
  virtual void WorkerFinished() = 0;
};

class Reconciler {
 public:
  // `events` (may be null: none) hears of every status change it writes.
  Reconciler(Caches caches, kube::KubeApi& api, DesiredOptions options,
             EventRecorder* events = nullptr)
      : caches_(caches),
        api_(api),
        options_(std::move(options)),
        events_(events) {}

  // Reconciles the MiniCluster "<namespace>/<name>" (or, in the worker role
  // and with no such MiniCluster, the Job of that name MultiKueue copied).
  // While it has no Job, the plan comes from the whole MiniCluster read from
  // the API server: the cache keeps a trimmed copy (TrimMiniClusterForCache),
  // and the Job is created from the fields it drops.
  ReconcileResult Reconcile(const std::string& key);

 private:
  // Copies of what the caches hold for one MiniCluster.
  struct Snapshot {
    nlohmann::json minicluster;
    std::optional<nlohmann::json> service, job, workload, network_policy;
    std::vector<nlohmann::json> pods;
    std::map<std::string, std::string> node_domains;
    Observed View() const;
  };
  // What creating the Job showed about it.
  struct Created {
    ReconcileResult result;
    // The Job as the API server has it now (created, or in the way).
    std::optional<nlohmann::json> job;
    bool abort = false;  // nothing more to do this time
  };

  std::optional<Snapshot> Observe(const std::string& key) const;
  // spec.topology's level on the nodes its lead pod waits for (GETs, since
  // the controller caches no Nodes; a failed one is left out and tried at
  // the next reconcile).
  void LookUpNodeDomains(const MiniCluster& mc, Snapshot& snapshot);
  // The worker role: the Service and NetworkPolicy of the Job "<key>" if
  // MultiKueue copied it here (copied_job.h); nothing for any other key.
  ReconcileResult ReconcileCopiedJob(const std::string& key);
  // The worker role, a MiniCluster of that name here: warns on the Job of
  // that name if MultiKueue copied it (it then gets no Service).
  void WarnIfCopiedJobHere(const std::string& key, const Snapshot& snapshot);
  // A Warning Event on the copied Job, once per Job and conflict.
  void WarnCopiedJob(const std::string& key, const nlohmann::json& job,
                     CopiedJobConflict conflict);
  // The MiniCluster as the API server has it now; nullopt when it is gone.
  std::expected<std::optional<nlohmann::json>, std::string> GetMiniCluster(
      const nlohmann::json& cached);
  std::optional<nlohmann::json> WorkloadOf(const nlohmann::json& job) const;
  ReconcileResult Execute(const std::string& key, const Snapshot& snapshot,
                          const std::optional<ParsedMiniCluster>& parsed,
                          const std::vector<Action>& plan,
                          const std::string& now);
  // spec.ttlSecondsAfterFinished of `mc`: deletes the MiniCluster once its
  // TTL ran out, else says when to look again. `object` holds the status it
  // has after the plan (the plan's status write, or the cached MiniCluster).
  ReconcileResult DeleteIfExpired(const std::string& key,
                                  const Snapshot& snapshot,
                                  const MiniCluster& mc,
                                  const nlohmann::json& object,
                                  std::chrono::system_clock::time_point now);
  // What creating an object came to. After a 409 the object of that name
  // is looked up: ours (made before the cache saw it), or another's, which
  // the label-filtered cache never shows.
  struct CreateOutcome {
    enum class Kind { kCreated, kOurs, kTheirs, kFailed, kLookupFailed };
    Kind kind = Kind::kFailed;
    nlohmann::json object;  // as the API server has it (created or found)
    std::string what;       // why, for the failures
  };
  CreateOutcome CreateOrFind(const std::string& key, const Action& action,
                             const std::string& uid, std::string_view kind);
  Created CreateJob(const std::string& key, const Action& action,
                    const std::string& uid);
  // What creating a Service or NetworkPolicy came to; `theirs` when one of
  // that name that the MiniCluster does not control is in the way.
  static ReconcileResult CreatedOrRetry(CreateOutcome created,
                                        ReconcileResult theirs);
  // Creates the Service; kServiceNameTaken if one of that name exists that
  // the MiniCluster `uid` does not control (it is left as it is).
  ReconcileResult CreateService(const std::string& key, const Action& action,
                                const std::string& uid);
  // Creates the NetworkPolicy; one of that name that the MiniCluster does
  // not control is left as it is (logged), and nothing else waits for it.
  ReconcileResult CreateNetworkPolicy(const std::string& key,
                                      const Action& action,
                                      const std::string& uid);
  ReconcileResult Apply(const std::string& key, const Action& action);
  // Applies a status and records the events its change calls for.
  ReconcileResult ApplyStatus(const std::string& key,
                              const nlohmann::json& minicluster,
                              const Action& action);
  void RecordEvents(const std::string& key, const nlohmann::json& minicluster,
                    const nlohmann::json& status);

  Caches caches_;
  kube::KubeApi& api_;
  DesiredOptions options_;
  EventRecorder* events_;
  WrittenStatuses written_;
  std::mutex warned_mu_;
  std::set<std::string> warned_;  // "<job uid>/<reason>" warned about
};

}  // namespace fcc::controller
