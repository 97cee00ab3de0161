#include "controller/brokers.h"

#include <algorithm>
#include <array>
#include <map>
#include <set>

#include "controller/desired.h"
#include "kube/informer.h"
#include "kube/object_meta.h"

namespace fcc::controller {
namespace {

using nlohmann::json;

constexpr char kIndexLabel[] = "batch.kubernetes.io/job-completion-index";
constexpr std::array<const char*, 2> kFailureCounts = {
    "batch.kubernetes.io/job-index-failure-count",
    "batch.kubernetes.io/job-index-ignored-failure-count"};

// The broker container's state `which` (terminated, running), or null.
const json& BrokerState(const json& pod, const char* which) {
  const json& statuses =
      kube::FieldAt(kube::FieldAt(pod, "status"), "containerStatuses");
  if (statuses.is_array()) {
    for (const json& s : statuses) {
      if (kube::StringAt(s, "name") == kBrokerContainerName) {
        return kube::FieldAt(kube::FieldAt(s, "state"), which);
      }
    }
  }
  static const json kNone;
  return kNone;
}

const json& BrokerTerminated(const json& pod) {
  return BrokerState(pod, "terminated");
}

// Ready went False after the broker started: it had been up (a new pod's
// Ready is False from before its container starts). RFC 3339 times in
// seconds compare as strings.
bool UnreadySinceStarted(const json& pod) {
  const json* ready = kube::FindCondition(pod, "Ready");
  const std::string& started =
      kube::StringAt(BrokerState(pod, "running"), "startedAt");
  return ready != nullptr && kube::StringAt(*ready, "status") == "False" &&
         !started.empty() &&
         kube::StringAt(*ready, "lastTransitionTime") > started;
}

// Kubernetes' DisruptionTarget reasons (k8s.io/api/core/v1), in words.
std::string Disruption(const std::string& reason) {
  if (reason == "EvictionByEvictionAPI") return "evicted";
  if (reason == "PreemptionByScheduler") return "preempted by the scheduler";
  if (reason == "DeletionByTaintManager") return "node lost (taint eviction)";
  if (reason == "DeletionByPodGC") return "node lost";
  if (reason == "TerminationByKubelet") return "node pressure or shutdown";
  return reason.empty() ? "disrupted" : reason;
}

// What one pod that is not a ready broker says; empty if nothing yet.
std::string WhyDown(const json& pod) {
  if (kube::ConditionTrue(pod, "DisruptionTarget")) {
    return Disruption(kube::StringAt(
        *kube::FindCondition(pod, "DisruptionTarget"), "reason"));
  }
  const json& terminated = BrokerTerminated(pod);
  if (kube::StringAt(terminated, "reason") == "OOMKilled") return "OOMKilled";
  if (const json& code = kube::FieldAt(terminated, "exitCode");
      code.is_number_integer()) {
    const int exit = code.get<int>();
    if (exit == kReplaceBrokerExit) return "broker stopped (exit 75)";
    return "broker exited " + std::to_string(exit);
  }
  if (kube::FieldAt(pod, "metadata").contains("deletionTimestamp")) {
    return "pod deleted";
  }
  if (UnreadySinceStarted(pod)) {
    return "not usable: its readiness probe says why";
  }
  return "";
}

bool ReadyBroker(const json& pod) {
  return kube::ConditionTrue(pod, "Ready") &&
         !kube::FieldAt(pod, "metadata").contains("deletionTimestamp");
}

// Neither deleted nor finished: a broker that is or will be running.
bool Live(const json& pod) {
  const std::string& phase =
      kube::StringAt(kube::FieldAt(pod, "status"), "phase");
  return !kube::FieldAt(pod, "metadata").contains("deletionTimestamp") &&
         phase != "Succeeded" && phase != "Failed";
}

int IndexOf(const json& pod) {
  const std::string& label = kube::StringAt(
      kube::FieldAt(kube::FieldAt(pod, "metadata"), "labels"), kIndexLabel);
  if (label.empty() || label.size() > 6 ||
      label.find_first_not_of("0123456789") != std::string::npos) {
    return -1;
  }
  return std::stoi(label);
}

// The broker container's exit code if its pod failed, else -1.
int FailedExit(const json& pod) {
  if (kube::StringAt(kube::FieldAt(pod, "status"), "phase") != "Failed") {
    return -1;
  }
  const json& code = kube::FieldAt(BrokerTerminated(pod), "exitCode");
  return code.is_number_integer() ? code.get<int>() : -1;
}

}  // namespace

void TrimPodForCache(json& pod) {
  kube::TrimForCache(pod);
  json metadata = json::object();
  const json& m = kube::FieldAt(pod, "metadata");
  for (const char* key :
       {"name", "namespace", "uid", "resourceVersion", "ownerReferences",
        "creationTimestamp", "deletionTimestamp"}) {
    if (m.contains(key)) metadata[key] = m[key];
  }
  const std::string& index =
      kube::StringAt(kube::FieldAt(m, "labels"), kIndexLabel);
  if (!index.empty()) metadata["labels"][kIndexLabel] = index;
  for (const char* key : {kFailureCounts[0], kFailureCounts[1],
                          static_cast<const char*>(kAdmittedAnnotation),
                          static_cast<const char*>(kTopologyAnnotation)}) {
    const json& value = kube::FieldAt(kube::FieldAt(m, "annotations"), key);
    if (value.is_string()) metadata["annotations"][key] = value;
  }
  json status = json::object();
  if (const json& phase = kube::FieldAt(kube::FieldAt(pod, "status"), "phase");
      phase.is_string()) {
    status["phase"] = phase;
  }
  for (const char* type : {"Ready", "DisruptionTarget"}) {
    if (const json* c = kube::FindCondition(pod, type); c != nullptr) {
      json kept{{"type", type}, {"status", kube::StringAt(*c, "status")}};
      for (const char* key : {"reason", "lastTransitionTime"}) {
        if (c->contains(key)) kept[key] = (*c)[key];
      }
      status["conditions"].push_back(std::move(kept));
    }
  }
  json state = json::object();
  if (const json& terminated = BrokerTerminated(pod); terminated.is_object()) {
    json& t = state["terminated"] = json::object();
    for (const char* key : {"exitCode", "reason"}) {
      if (terminated.contains(key)) t[key] = terminated[key];
    }
  }
  if (const std::string& started =
          kube::StringAt(BrokerState(pod, "running"), "startedAt");
      !started.empty()) {
    state["running"] = {{"startedAt", started}};
  }
  if (!state.empty()) {
    status["containerStatuses"] = json::array(
        {{{"name", kBrokerContainerName}, {"state", std::move(state)}}});
  }
  const std::string node =
      kube::StringAt(kube::FieldAt(pod, "spec"), "nodeName");
  pod = json{{"metadata", std::move(metadata)}, {"status", std::move(status)}};
  if (!node.empty()) pod["spec"] = {{"nodeName", node}};
}

const json* LivePodOfIndex0(const std::vector<json>& pods) {
  for (const json& pod : pods) {
    if (IndexOf(pod) == 0 && Live(pod)) return &pod;
  }
  return nullptr;
}

std::vector<std::string> NodesToLookUp(const std::vector<json>& pods,
                                       int expected) {
  const json* lead = LivePodOfIndex0(pods);
  if (lead == nullptr ||
      kube::FieldAt(kube::FieldAt(*lead, "metadata"), "annotations")
          .contains(kTopologyAnnotation)) {
    return {};
  }
  std::set<std::string> nodes;
  int placed = 0;
  for (const json& pod : pods) {
    if (!Live(pod)) continue;
    const std::string& node =
        kube::StringAt(kube::FieldAt(pod, "spec"), "nodeName");
    if (node.empty()) return {};
    nodes.insert(node);
    ++placed;
  }
  if (placed < expected) return {};
  return {nodes.begin(), nodes.end()};
}

std::optional<std::map<std::string, std::vector<int>>> IndexesByDomain(
    const std::vector<json>& pods, int expected,
    const std::map<std::string, std::string>& domain_of_node) {
  if (NodesToLookUp(pods, expected).empty()) return std::nullopt;
  std::map<std::string, std::vector<int>> out;
  for (const json& pod : pods) {
    if (!Live(pod)) continue;
    auto it = domain_of_node.find(
        kube::StringAt(kube::FieldAt(pod, "spec"), "nodeName"));
    if (it == domain_of_node.end()) return std::nullopt;
    out[it->second].push_back(IndexOf(pod));
  }
  for (auto& [domain, indexes] : out) std::ranges::sort(indexes);
  return out;
}

std::string DownBrokers(const std::vector<json>& pods, int size) {
  // Per index, its pods oldest first (RFC 3339 times sort as strings).
  std::map<int, std::vector<const json*>> by_index;
  for (const json& pod : pods) {
    if (const int index = IndexOf(pod); index >= 0) {
      by_index[index].push_back(&pod);
    }
  }
  std::string text;
  int listed = 0, more = 0;
  for (int index = 0; index < size; ++index) {
    auto& list = by_index[index];
    bool ready = false;
    for (const json* pod : list) ready = ready || ReadyBroker(*pod);
    if (ready) continue;
    if (listed == kMaxDownListed) {
      ++more;
      continue;
    }
    ++listed;
    std::sort(list.begin(), list.end(), [](const json* a, const json* b) {
      return kube::StringAt(kube::FieldAt(*a, "metadata"),
                            "creationTimestamp") <
             kube::StringAt(kube::FieldAt(*b, "metadata"), "creationTimestamp");
    });
    std::string why;
    for (auto it = list.rbegin(); it != list.rend() && why.empty(); ++it) {
      why = WhyDown(**it);
    }
    if (why.empty()) why = list.empty() ? "no pod" : "replacement starting";
    if (!text.empty()) text += ", ";
    text += "index " + std::to_string(index) + " (" + why + ")";
  }
  if (more > 0) text += ", and " + std::to_string(more) + " more";
  return text;
}

int AdmittedSize(const MiniCluster& mc, const json& job) {
  const json& parallelism =
      kube::FieldAt(kube::FieldAt(job, "spec"), "parallelism");
  if (!parallelism.is_number_integer()) return mc.spec.size;
  return std::clamp(parallelism.get<int>(), 0, mc.spec.size);
}

std::vector<const json*> LeadPodsToTell(const std::vector<json>& pods,
                                        const std::string& count) {
  std::vector<const json*> out;
  for (const json& pod : pods) {
    if (IndexOf(pod) != 0 || !Live(pod) ||
        kube::StringAt(
            kube::FieldAt(kube::FieldAt(pod, "metadata"), "annotations"),
            kAdmittedAnnotation) == count) {
      continue;
    }
    out.push_back(&pod);
  }
  return out;
}

int LeadReplacements(const std::vector<json>& pods) {
  int most = 0;
  for (const json& pod : pods) {
    if (IndexOf(pod) != 0) continue;
    int sum = 0;
    for (const char* count : kFailureCounts) {
      const std::string& value = kube::StringAt(
          kube::FieldAt(kube::FieldAt(pod, "metadata"), "annotations"), count);
      if (!value.empty() && value.size() <= 6 &&
          value.find_first_not_of("0123456789") == std::string::npos) {
        sum += std::stoi(value);
      }
    }
    most = std::max(most, sum);
  }
  return most;
}

IndexFailure WhyAnIndexFailed(const std::vector<json>& pods,
                              int broker_restarts) {
  std::optional<int> lead_code, follower_code;
  int follower = -1;
  std::map<int, int> counted;  // failures spec.brokerRestarts bounds
  int exhausted = -1;
  for (const json& pod : pods) {
    const int index = IndexOf(pod), code = FailedExit(pod);
    if (index < 0 || code < 0) continue;
    if (code == kReplaceBrokerExit || code == 137) {
      if (++counted[index] > broker_restarts) exhausted = index;
    } else if (index == 0) {
      lead_code = code;
    } else {
      follower = index;
      follower_code = code;
    }
  }
  if (lead_code == kLeadLostExit) {
    return {"LeadBrokerLost",
            "the lead broker (index 0) was stopped or lost (its pod exited " +
                std::to_string(kLeadLostExit) +
                "), and its Flux instance with it; recreate the MiniCluster "
                "to start a new one"};
  }
  if (lead_code == kStateUnwritableExit) {
    return {"StateUnwritable",
            "the lead cannot write its statedir on spec.flux.state's claim "
            "(mounted at " +
                std::string(kStateMountPath) +
                "): give spec.fluxUser write access to the volume's root "
                "(kubectl logs job/NAME says more)"};
  }
  if (lead_code) {
    return {"CommandFailed", "the lead broker's command exited " +
                                 std::to_string(*lead_code) +
                                 " (kubectl logs job/NAME shows its output)"};
  }
  if (exhausted >= 0) {
    return {"BrokerRestartsExhausted",
            "index " + std::to_string(exhausted) + " was lost " +
                std::to_string(counted[exhausted]) +
                " times, more than spec.brokerRestarts (" +
                std::to_string(broker_restarts) +
                "): raise it, or find why its pods fail"};
  }
  if (follower_code) {
    return {"BrokerFailed", "the broker of index " + std::to_string(follower) +
                                " exited " + std::to_string(*follower_code)};
  }
  return {};
}

IndexFailure WhyAFailedIndexIsGone(const std::string& failed_indexes,
                                   int broker_restarts, bool ephemeral) {
  if (failed_indexes.empty()) return {};
  const std::string first =
      failed_indexes.substr(0, failed_indexes.find_first_of(",-"));
  if (first == "0" && ephemeral) {
    return {"LeadBrokerLost",
            "the lead broker (index 0) was lost and its pod is gone (deleted "
            "or evicted), and its Flux instance with it; recreate the "
            "MiniCluster to start a new one"};
  }
  return {"BrokerRestartsExhausted", "index " + failed_indexes +
                                         " failed and its pods are gone: lost "
                                         "more than spec.brokerRestarts (" +
                                         std::to_string(broker_restarts) +
                                         ") times"};
}

}  // namespace fcc::controller
