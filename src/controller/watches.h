// The informers the controller runs - MiniClusters, and the Services, Jobs
// and Kueue Workloads made for them - and the stores they fill.
#pragma once

#include <string>
#include <thread>
#include <vector>

#include "common/stop_signal.h"
#include "controller/reconciler.h"
#include "kube/informer.h"
#include "kube/kube_client.h"
#include "kube/object_store.h"

namespace fcc::controller {

struct WatchOptions {
  std::string namespace_name;  // empty: all namespaces
  std::string kueue_workload_api = "kueue.x-k8s.io/v1beta1";
  int watch_timeout_s = 300;
  // Kueue Workloads to watch; empty: all of them. "minicluster.dev/name"
  // once Kueue copies that label from Jobs (integrations.labelKeysToCopy).
  std::string workload_label_selector;
};

class Watches {
 public:
  Watches(const kube::KubeClient& client, const WatchOptions& options);
  // Stops and joins the informers if Start ran.
  ~Watches();
  Watches(const Watches&) = delete;
  Watches& operator=(const Watches&) = delete;

  // Register event handlers before Start.
  kube::Informer& miniclusters() { return miniclusters_; }
  kube::Informer& services() { return services_; }
  kube::Informer& network_policies() { return network_policies_; }
  kube::Informer& jobs() { return jobs_; }
  kube::Informer& workloads() { return workloads_; }
  kube::Informer& pods() { return pods_; }

  Caches caches() const;
  // Every informer has listed once (/readyz).
  bool HasSynced() const;
  // Runs each informer on a thread of its own until `stop`.
  void Start(common::StopSignal& stop);

 private:
  kube::ObjectStore minicluster_store_, service_store_, network_policy_store_,
      job_store_, workload_store_, pod_store_;
  kube::Informer miniclusters_, services_, network_policies_, jobs_, workloads_,
      pods_;
  common::StopSignal* stop_ = nullptr;
  std::vector<std::thread> threads_;
};

}  // namespace fcc::controller
