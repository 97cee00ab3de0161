// Job (+ Kueue Workload) -> MiniCluster status. Pure.
//
// status:
//   observedGeneration: <metadata.generation the status describes>
//   state: Pending | Queued | Running | Succeeded | Failed
//   jobName: <the Job>
//   keyId: <the Job's master key id; absent for the default key>
//   workload: {name, admitted, clusterQueue, clusterName, reason, message}
//             # with Kueue; clusterName: the MultiKueue worker it runs on
//   conditions: Queued, Running, Succeeded, Failed, Degraded, and
//               LeadReplaced once it happened  (metav1.Condition)
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "controller/minicluster.h"

namespace fcc::controller {

// The state shown in `kubectl get miniclusters` and the condition that is
// True; every other condition of the four is False.
enum class State { kPending, kQueued, kRunning, kSucceeded, kFailed };
std::string StateName(State state);

// What Kueue says about the Job, read from its Workload.
struct WorkloadSummary {
  std::string name;
  bool admitted = false;
  std::string cluster_queue;
  // The worker cluster MultiKueue dispatched it to (status.clusterName);
  // empty without MultiKueue.
  std::string cluster_name;
  std::string reason;
  std::string message;
};
WorkloadSummary SummarizeWorkload(const nlohmann::json& workload);

// The uids of the Jobs `workload` belongs to: Kueue gives the Workload it
// makes for a Job an ownerReference to the Job and the label
// kueue.x-k8s.io/job-uid; either identifies the Job. The one definition of
// "the Workload of this Job": the Workload cache is indexed by it.
std::vector<std::string> JobUidsOfWorkload(const nlohmann::json& workload);

// Keeps of a Workload only what the status reads (its metadata, conditions
// and admitted ClusterQueue): the spec's pod sets copy the whole pod
// template of its Job, most of the object.
void TrimWorkloadForCache(nlohmann::json& workload);

// The first of `workloads` that belongs to `job` (JobUidsOfWorkload).
const nlohmann::json* FindWorkloadForJob(
    const std::vector<nlohmann::json>& workloads, const nlohmann::json& job);

// Computes the whole status subresource for `mc`. `job` and `workload` are
// as observed (nullptr when absent). Conditions keep their previous
// lastTransitionTime when their status did not change. `now` is an
// RFC 3339 time used for transitions. `pods`, the Job's (brokers.h), name
// the brokers that are down in the Degraded condition.
nlohmann::json ComputeStatus(const MiniCluster& mc, const nlohmann::json* job,
                             const nlohmann::json* workload,
                             const std::string& now,
                             const std::vector<nlohmann::json>* pods = nullptr);

// Status for a MiniCluster whose spec is invalid: Failed=True, reason
// InvalidSpec, the validation errors as the message.
nlohmann::json InvalidSpecStatus(const MiniCluster& mc,
                                 const std::string& errors,
                                 const std::string& now);

}  // namespace fcc::controller
