// Which brokers of a running MiniCluster are down, and why, from its Job's
// pods (the Degraded condition's message, docs/user/broker-loss.md).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "controller/minicluster.h"

namespace fcc::controller {

// The brokers the running Job has: spec.size, or fewer when Kueue admitted
// fewer (partial admission sets the Job's parallelism).
int AdmittedSize(const MiniCluster& mc, const nlohmann::json& job);

// The lead's pods (index 0, neither deleted nor finished) whose
// kAdmittedAnnotation does not say `count`: the controller annotates them
// (the lead of a MiniCluster Kueue may admit in part waits for it).
std::vector<const nlohmann::json*> LeadPodsToTell(
    const std::vector<nlohmann::json>& pods, const std::string& count);

// The nodes whose spec.topology level the lead's pod waits for: those of
// the `expected` running brokers once each has a node and the live lead
// pod has no kTopologyAnnotation yet; empty otherwise.
std::vector<std::string> NodesToLookUp(const std::vector<nlohmann::json>& pods,
                                       int expected);
// Each domain's broker indexes (ascending), from `domain_of_node` (node ->
// its label value), for the live pods; nullopt unless NodesToLookUp's
// conditions hold and every node is known.
std::optional<std::map<std::string, std::vector<int>>> IndexesByDomain(
    const std::vector<nlohmann::json>& pods, int expected,
    const std::map<std::string, std::string>& domain_of_node);
// The live lead pod (index 0, neither deleted nor finished), or nullptr.
const nlohmann::json* LivePodOfIndex0(const std::vector<nlohmann::json>& pods);

// Keeps of a broker pod what DownBrokers, LeadReplacements, LeadPodsToTell
// and the topology read: its index label, the Job controller's failure
// counts, kAdmittedAnnotation and kTopologyAnnotation, creation and
// deletion times, owner, its node, and of its status the phase, the Ready
// and DisruptionTarget conditions and the broker container's state.
void TrimPodForCache(nlohmann::json& pod);

// "index 1 (OOMKilled), index 2 (evicted)": each index below `size` none of
// whose pods is Ready, with the most telling reason its pods show (a
// disruption, an OOM kill, the broker's exit code, a deletion, or a
// replacement still starting); empty when every index has a ready pod.
// The first kMaxDownListed, then ", and M more": the list goes into a
// condition message, and a status over the CRD's maxLength is refused
// whole (a large MiniCluster's status would freeze while most degraded).
inline constexpr int kMaxDownListed = 20;
std::string DownBrokers(const std::vector<nlohmann::json>& pods, int size);

// How often the lead's pod (index 0) was replaced: the failures of its
// index the Job controller stamps on each new pod, counted or ignored
// (batch.kubernetes.io/job-index-failure-count, -ignored-failure-count).
int LeadReplacements(const std::vector<nlohmann::json>& pods);

// Why a broker index failed the Job (its podFailurePolicy's FailIndex, or
// more failures than spec.brokerRestarts), from its pods' exit codes:
// reason and message for the MiniCluster's Failed condition; an empty
// reason when the pods do not say.
struct IndexFailure {
  std::string reason;
  std::string message;
};
IndexFailure WhyAnIndexFailed(const std::vector<nlohmann::json>& pods,
                              int broker_restarts);

// The same when the failed index's pods are gone (deleted or evicted: a
// stopped pod is removed), from the Job's status.failedIndexes ("0,2-3"):
// index 0 of an ephemeral MiniCluster is the lead lost (its program's
// failure keeps its pod); any other index, or a persistent lead, was lost
// past spec.brokerRestarts.
IndexFailure WhyAFailedIndexIsGone(const std::string& failed_indexes,
                                   int broker_restarts, bool ephemeral);

}  // namespace fcc::controller
