// Reconcile one MiniCluster: observe (caches) -> plan (pure) -> act (API).
//
// Who owns which Job field, and why the controller never fights Kueue:
//  * The Job is created once with POST (field manager
//    "minicluster-controller-create"). A POST fails with 409 if the Job
//    exists, so a stale cache can never re-send `suspend: true` over
//    Kueue's admission. Everything set only here - suspend, parallelism,
//    completions, the pod template (labels, annotations, nodeSelector,
//    tolerations, schedulingGates), the Kueue labels - is never sent again.
//  * Afterwards the controller server-side-applies only the Job's own
//    labels and ownerReference (field manager "minicluster-controller").
//    With SSA a manager's apply removes fields it owned and now omits; since
//    this manager never owned suspend, parallelism or the template, leaving
//    them out cannot reset what Kueue set.
//  * For an unqueued MiniCluster, spec.suspend is mirrored onto the Job by a
//    third manager ("minicluster-controller-launcher") whose apply body
//    holds only spec.suspend. It is never used for a queued Job (label on
//    the MiniCluster or on the Job), where Kueue owns suspend.
//  * The Service is fully owned: applied with force by
//    "minicluster-controller".
#ifndef FCC_CONTROLLER_RECONCILER_H_
#define FCC_CONTROLLER_RECONCILER_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "desired.h"
#include "kube_client.h"
#include "watch.h"

namespace fcc::controller {

inline constexpr char kFieldManager[] = "minicluster-controller";
inline constexpr char kCreateFieldManager[] = "minicluster-controller-create";
inline constexpr char kLauncherFieldManager[] =
    "minicluster-controller-launcher";

// TrimForCache, and of a Job also spec.template: the reconciler and the
// status read a Job's metadata, spec.suspend and status only, and the pod
// template (the start script and broker config included) is most of a
// Job. It is set once at creation and never compared (see above).
void TrimJobForCache(nlohmann::json& job);

// What the caches hold for one MiniCluster; nullptr means absent.
struct Observed {
  const nlohmann::json* minicluster = nullptr;
  const nlohmann::json* service = nullptr;
  const nlohmann::json* job = nullptr;
  const nlohmann::json* workload = nullptr;
};

struct Action {
  enum class Kind {
    kApplyService,
    kCreateJob,
    kApplyJob,
    kSetJobSuspend,
    kApplyStatus
  };
  Kind kind;
  std::string path;  // collection path for kCreateJob, object path otherwise
  nlohmann::json body;
  std::string field_manager;
  bool force = true;
};
std::string ActionName(Action::Kind kind);

// The writes needed to move the cluster from `observed` to what the
// MiniCluster asks for. Pure; an empty plan means nothing to do.
std::vector<Action> PlanReconcile(const Observed& observed,
                                  const DesiredOptions& options,
                                  const std::string& now);

// The caches the reconciler reads.
struct Caches {
  const ObjectStore& miniclusters;
  const ObjectStore& services;
  const ObjectStore& jobs;
  const ObjectStore& workloads;
};

class Reconciler {
 public:
  Reconciler(Caches caches, KubeApi& api, DesiredOptions options)
      : caches_(caches), api_(api), options_(std::move(options)) {}

  // Reconciles the MiniCluster "<namespace>/<name>". Returns false when a
  // write failed and the key should be retried with back-off.
  bool Reconcile(const std::string& key);

 private:
  Caches caches_;
  KubeApi& api_;
  DesiredOptions options_;
};

}  // namespace fcc::controller

#endif  // FCC_CONTROLLER_RECONCILER_H_
