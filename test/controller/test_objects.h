// MiniCluster objects shaped like the API server returns them.
#ifndef FCC_TEST_CONTROLLER_TEST_OBJECTS_H_
#define FCC_TEST_CONTROLLER_TEST_OBJECTS_H_

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "controller/copied_job.h"
#include "controller/desired.h"
#include "controller/minicluster.h"
#include "kube/kube_client.h"
#include "kube/object_store.h"

namespace fcc::controller::testing {

inline nlohmann::json MiniClusterObject() {
  return nlohmann::json::parse(R"({
    "apiVersion": "minicluster.dev/v1alpha1",
    "kind": "MiniCluster",
    "metadata": {"name": "demo", "namespace": "science", "generation": 3,
                 "uid": "1b4e28ba-2fa1-11d2-883f-0016d3cca427"},
    "spec": {"size": 4, "image": "fluxrm/flux-sched:bookworm",
             "command": ["flux", "run", "-N4", "hostname"]}
  })");
}

// MiniClusterObject() with every pod template field a user may set.
inline nlohmann::json MiniClusterWithPodFields() {
  nlohmann::json object = MiniClusterObject();
  object["spec"].update(nlohmann::json::parse(R"({
    "podLabels": {"team": "physics", "example.com/tier": "batch"},
    "podAnnotations": {"kueue.x-k8s.io/podset-preferred-topology": "rack"},
    "nodeSelector": {"disk": "ssd"},
    "tolerations": [{"key": "gpu", "operator": "Exists",
                     "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
    "serviceAccountName": "flux-runner",
    "volumes": [{"name": "data",
                 "persistentVolumeClaim": {"claimName": "lammps-data"}},
                {"name": "scratch", "emptyDir": {}}],
    "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": true},
                     {"name": "scratch", "mountPath": "/run2/scratch"}]
  })"));
  return object;
}

// A fake API server's answer to a MiniCluster GET (the reconciler reads
// the whole MiniCluster before it creates a Job), from `store`; nullopt if
// `path` is not a MiniCluster's.
inline std::optional<kube::HttpResponse> MiniClusterGet(
    const kube::ObjectStore& store, const std::string& path) {
  const std::string ns_marker = "/namespaces/", marker = "/miniclusters/";
  const auto at = path.find(marker);
  const auto ns_at = path.find(ns_marker);
  if (at == std::string::npos || ns_at == std::string::npos) {
    return std::nullopt;
  }
  const auto ns_start = ns_at + ns_marker.size();
  const std::string key = path.substr(ns_start, at - ns_start) + "/" +
                          path.substr(at + marker.size());
  auto object = store.Get(key);
  if (!object) return kube::HttpResponse{404, "", ""};
  return kube::HttpResponse{200, object->dump(), ""};
}

// The parsed MiniCluster of a valid object; a parse error fails the test.
inline MiniCluster ParseValid(const nlohmann::json& object) {
  ParseResult r = ParseMiniCluster(object);
  EXPECT_TRUE(r.ok()) << r.ErrorText();
  return *r.minicluster;
}

// A MiniCluster's Job as MultiKueue creates it on a worker
// (job_multikueue_adapter.go): metadata cloned without ownerReferences,
// uid and managedFields; the prebuilt-workload and origin labels added.
inline nlohmann::json CopiedJob(const nlohmann::json& mc_object) {
  nlohmann::json job =
      DesiredJob(*ParseMiniCluster(mc_object).minicluster, DesiredOptions{});
  job["metadata"].erase("ownerReferences");
  job["metadata"]["uid"] = "worker-job-uid";
  job["metadata"]["labels"][kMultiKueueOriginLabel] = "multikueue";
  job["metadata"]["labels"]["kueue.x-k8s.io/prebuilt-workload-name"] =
      "job-demo-1";
  return job;
}

}  // namespace fcc::controller::testing

#endif  // FCC_TEST_CONTROLLER_TEST_OBJECTS_H_
