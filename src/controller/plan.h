// The plan step of a reconcile: what the caches show -> the writes that
// bring the cluster to what the MiniCluster asks for. Pure.
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
//  * The Service and the NetworkPolicy are fully owned: created, then
//    applied with force by "minicluster-controller" when they drift.
//  * Of a pod, only the lead's kAdmittedAnnotation, applied by
//    "minicluster-controller" when Kueue may admit fewer brokers than size,
//    and its kTopologyAnnotation, applied once by
//    "minicluster-controller-topology" when spec.topology is set.
#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "controller/desired.h"

namespace fcc::controller {

inline constexpr char kFieldManager[] = "minicluster-controller";
inline constexpr char kCreateFieldManager[] = "minicluster-controller-create";
inline constexpr char kLauncherFieldManager[] =
    "minicluster-controller-launcher";
// The lead pod's kTopologyAnnotation, apart from its admitted count (one
// manager's apply would drop the other's annotation).
inline constexpr char kTopologyFieldManager[] =
    "minicluster-controller-topology";

// What the caches hold for one MiniCluster; nullptr means absent.
struct Observed {
  const nlohmann::json* minicluster = nullptr;
  const nlohmann::json* service = nullptr;
  const nlohmann::json* job = nullptr;
  const nlohmann::json* workload = nullptr;
  const nlohmann::json* network_policy = nullptr;
  const std::vector<nlohmann::json>* pods = nullptr;  // the Job's
  // spec.topology's level on the nodes of NodesToLookUp (brokers.h).
  const std::map<std::string, std::string>* node_domains = nullptr;
};

struct Action {
  enum class Kind {
    kCreateService,
    kApplyService,
    kCreateNetworkPolicy,
    kApplyNetworkPolicy,
    kCreateJob,
    kApplyJob,
    kSetJobSuspend,
    kApplyLeadAdmitted,
    kApplyLeadTopology,
    kApplyStatus
  };
  Kind kind;
  // The collection path for a create, the object's path otherwise.
  std::string path;
  nlohmann::json body;
  std::string field_manager;
  bool force = true;
};
std::string ActionName(Action::Kind kind);

// The part of a desired object the API server echoes back unchanged (its
// labels, ownerReferences and spec): a cached object of which it is a
// subset (IsSubset) needs no apply.
nlohmann::json Comparable(const nlohmann::json& desired);

// One fully owned object (a Service, a NetworkPolicy) of `owner_uid`:
// create it when the cache has none (a POST, which never takes over one
// the label-filtered cache does not show), apply it with force when it
// drifted, and nothing when one of that name has another controller.
// `collection` is its collection path.
std::optional<Action> OwnedObjectStep(const nlohmann::json& desired,
                                      const nlohmann::json* observed,
                                      const std::string& owner_uid,
                                      Action::Kind create, Action::Kind apply,
                                      const std::string& collection);

// The writes needed to move the cluster from `observed` to what the
// MiniCluster asks for, in order; a status write, if any, comes last. An
// empty plan means nothing to do.
std::vector<Action> PlanReconcile(const Observed& observed,
                                  const DesiredOptions& options,
                                  const std::string& now);

// The MiniCluster `observed` holds, parsed: what a reconcile plans from,
// parsed once; nullopt when it is gone, being deleted (the garbage
// collector cleans up) or not a MiniCluster at all.
struct ParsedMiniCluster {
  MiniCluster mc;
  std::string errors;  // what is wrong with its spec; empty: valid
};
std::optional<ParsedMiniCluster> ParseObserved(const Observed& observed);
// PlanReconcile and PlanStatus of what ParseObserved gave.
std::vector<Action> PlanReconcile(
    const Observed& observed, const std::optional<ParsedMiniCluster>& parsed,
    const DesiredOptions& options, const std::string& now);

// The status write alone that `observed` calls for (the last step of
// PlanReconcile); nullopt when the MiniCluster already shows it. The
// reconciler asks again when a create showed more than the caches did (the
// created Job, a Job of that name in the way, or a Service of that name the
// MiniCluster does not control: `service_taken`).
std::optional<Action> PlanStatus(const Observed& observed,
                                 const std::string& now,
                                 bool service_taken = false);
std::optional<Action> PlanStatus(const Observed& observed,
                                 const std::optional<ParsedMiniCluster>& parsed,
                                 const std::string& now,
                                 bool service_taken = false);

// How long a finished MiniCluster has left before the controller deletes
// it: spec.ttlSecondsAfterFinished from the lastTransitionTime of the
// Succeeded or Failed condition in `object`'s status (the MiniCluster, or
// the status write about to be sent). nullopt when it has no TTL or has
// not finished; zero or less: delete it now.
std::optional<std::chrono::seconds> TtlLeft(
    const MiniCluster& mc, const nlohmann::json& object,
    std::chrono::system_clock::time_point now);

// The DELETE of a MiniCluster, of this uid only (a new one of the same name
// is not touched); its Job, pods and Service go by garbage collection.
struct Deletion {
  std::string path;
  nlohmann::json body;  // DeleteOptions
};
Deletion DeleteMiniClusterRequest(const MiniCluster& mc,
                                  const std::string& uid);

}  // namespace fcc::controller
