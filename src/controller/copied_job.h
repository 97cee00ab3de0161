// The worker role (--multikueue-worker). Kueue's MultiKueue runs a
// MiniCluster on a worker cluster by copying its Job there (metadata and
// spec only): the worker has no MiniCluster, and the headless Service the
// brokers resolve each other through is not copied. So the worker's
// controller makes, for each such copy, the Service and NetworkPolicy its
// MiniCluster would have, owned by the copied Job so they go with it.
// Pure: the Job -> the objects and the plan.
#pragma once

#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "controller/desired.h"
#include "controller/events.h"
#include "controller/plan.h"

namespace fcc::controller {

// Set by MultiKueue on every object it copies to a worker.
inline constexpr char kMultiKueueOriginLabel[] =
    "kueue.x-k8s.io/multikueue-origin";

// True for a Job that MultiKueue copied from a MiniCluster's Job: it has the
// origin label, the controller's managed-by label, a minicluster.dev/name
// label naming the Job itself, and a curve.minicluster.dev volume.
bool IsCopiedMiniClusterJob(const nlohmann::json& job);

// The Service and NetworkPolicy of the MiniCluster whose Job `job` is a copy
// of (DesiredService, DesiredNetworkPolicy), each with the origin label and
// one ownerReference, to the Job. The broker port is read from the Job's
// broker container; an error names what is missing.
struct CopiedJobObjects {
  nlohmann::json service;
  nlohmann::json network_policy;
};
std::expected<CopiedJobObjects, std::string> DesiredForCopiedJob(
    const nlohmann::json& job, const DesiredOptions& options);

// Creates what is missing and re-applies what drifted; an object of that
// name that the Job does not control is left alone. `service` and
// `network_policy` are as cached (nullptr: absent).
std::vector<Action> PlanCopiedJob(const CopiedJobObjects& desired,
                                  const nlohmann::json& job,
                                  const nlohmann::json* service,
                                  const nlohmann::json* network_policy);

// What keeps a copied Job's brokers from wiring up on this worker, which
// the controller does not undo (the object is a tenant's): the manager's
// MiniCluster shows Running meanwhile, so it is said on the Job.
enum class CopiedJobConflict {
  // A Service of the Job's name that the Job does not control: the brokers'
  // names <name>-<index>.<name> resolve through it, or through nothing.
  kServiceTaken,
  // A MiniCluster of the Job's name on this worker: the name is reconciled
  // as that MiniCluster, and the copy gets no Service.
  kMiniClusterHere,
};

// The Warning Event on the Job for `conflict`, naming the object in the way
// and the fix. Pure.
EventSpec CopiedJobConflictEvent(const nlohmann::json& job,
                                 CopiedJobConflict conflict);

}  // namespace fcc::controller
