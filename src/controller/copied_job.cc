#include "controller/copied_job.h"

#include <fmt/format.h>

#include "common/volume_contract.h"
#include "kube/api_path.h"
#include "kube/object_meta.h"

namespace fcc::controller {
namespace {

using nlohmann::json;

const json& PodSpecOf(const json& job) {
  return kube::FieldAt(kube::FieldAt(kube::FieldAt(job, "spec"), "template"),
                       "spec");
}

bool HasCurveVolume(const json& job) {
  const json& volumes = kube::FieldAt(PodSpecOf(job), "volumes");
  if (!volumes.is_array()) return false;
  for (const auto& volume : volumes) {
    if (kube::StringAt(kube::FieldAt(volume, "csi"), "driver") ==
        common::kDriverName) {
      return true;
    }
  }
  return false;
}

// The broker container's "flux-broker" port, as DesiredJob renders it.
std::optional<int> BrokerPort(const json& job) {
  const json& containers = kube::FieldAt(PodSpecOf(job), "containers");
  if (!containers.is_array()) return std::nullopt;
  for (const auto& container : containers) {
    if (kube::StringAt(container, "name") != kBrokerContainerName) continue;
    const json& ports = kube::FieldAt(container, "ports");
    if (!ports.is_array()) return std::nullopt;
    for (const auto& port : ports) {
      const json& number = kube::FieldAt(port, "containerPort");
      if (kube::StringAt(port, "name") == "flux-broker" &&
          number.is_number_integer() && number.get<int>() > 0 &&
          number.get<int>() <= 65535) {
        return number.get<int>();
      }
    }
  }
  return std::nullopt;
}

// The Job as the controller of both objects. No blockOwnerDeletion: that
// would need update rights on jobs/finalizers, and nothing waits for them.
json JobOwnerReference(const json& job) {
  const kube::ObjectMeta meta(job);
  return json::array({{{"apiVersion", "batch/v1"},
                       {"kind", "Job"},
                       {"name", meta.name()},
                       {"uid", meta.uid()},
                       {"controller", true}}});
}

void OwnedByJob(const json& job, json& object) {
  object["metadata"]["ownerReferences"] = JobOwnerReference(job);
  object["metadata"]["labels"][kMultiKueueOriginLabel] =
      kube::ObjectMeta(job).label(kMultiKueueOriginLabel);
}

}  // namespace

bool IsCopiedMiniClusterJob(const json& job) {
  const kube::ObjectMeta meta(job);
  return meta.has_label(kMultiKueueOriginLabel) &&
         meta.label(kManagedByLabel) == kManagedByValue &&
         !meta.name().empty() && meta.label(kNameLabel) == meta.name() &&
         HasCurveVolume(job);
}

std::expected<CopiedJobObjects, std::string> DesiredForCopiedJob(
    const json& job, const DesiredOptions& options) {
  const kube::ObjectMeta meta(job);
  // The brokers' names are <pod>.<subdomain>: the Service must have the
  // name the template gives.
  if (kube::StringAt(PodSpecOf(job), "subdomain") != meta.name()) {
    return std::unexpected(
        "the Job's spec.template.spec.subdomain is not the Job's name, as "
        "minicluster-controller renders it; it was not made from a "
        "MiniCluster's Job");
  }
  const std::optional<int> port = BrokerPort(job);
  if (!port) {
    return std::unexpected(
        "the Job's flux-broker container has no containerPort named "
        "flux-broker, as minicluster-controller renders it");
  }
  MiniCluster mc;
  mc.name = meta.name();
  mc.namespace_name = meta.namespace_name();
  mc.spec.broker_port = *port;
  CopiedJobObjects objects{DesiredService(mc, options),
                           DesiredNetworkPolicy(mc)};
  OwnedByJob(job, objects.service);
  OwnedByJob(job, objects.network_policy);
  return objects;
}

std::vector<Action> PlanCopiedJob(const CopiedJobObjects& desired,
                                  const json& job, const json* service,
                                  const json* network_policy) {
  const kube::ObjectMeta meta(job);
  std::vector<Action> actions;
  if (meta.deleting()) return actions;
  if (auto step = OwnedObjectStep(
          desired.service, service, meta.uid(), Action::Kind::kCreateService,
          Action::Kind::kApplyService,
          kube::CollectionPath("v1", "services", meta.namespace_name()))) {
    actions.push_back(std::move(*step));
  }
  if (auto step = OwnedObjectStep(
          desired.network_policy, network_policy, meta.uid(),
          Action::Kind::kCreateNetworkPolicy, Action::Kind::kApplyNetworkPolicy,
          kube::CollectionPath("networking.k8s.io/v1", "networkpolicies",
                               meta.namespace_name()))) {
    actions.push_back(std::move(*step));
  }
  return actions;
}

EventSpec CopiedJobConflictEvent(const json& job, CopiedJobConflict conflict) {
  const kube::ObjectMeta meta(job);
  const std::string what =
      fmt::format("{}/{}", meta.namespace_name(), meta.name());
  // On the manager the MiniCluster is Running: say where to look from there.
  constexpr char kManager[] =
      "; the MiniCluster on the MultiKueue manager shows Running meanwhile "
      "(its Admitted event names this worker)";
  if (conflict == CopiedJobConflict::kServiceTaken) {
    return {"Warning", "ServiceNameTaken", "CreateService",
            fmt::format(
                "Service {0} exists and is not this Job's: the brokers' names "
                "{1}-0.{1}, {1}-1.{1}, ... resolve through it, not to this "
                "Job's pods, so they never wire up; delete or rename that "
                "Service on this worker and the controller makes the Job's "
                "own{2}",
                what, meta.name(), kManager)};
  }
  return {"Warning", "MiniClusterNameTaken", "CreateService",
          fmt::format(
              "MiniCluster {0} exists on this worker with the name of this "
              "Job that MultiKueue copied here, so the controller reconciles "
              "that MiniCluster and makes no Service for this Job: its brokers "
              "never wire up; delete or rename the worker's MiniCluster {0}{1}",
              what, kManager)};
}

}  // namespace fcc::controller
