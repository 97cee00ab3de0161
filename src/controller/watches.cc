#include "controller/watches.h"

#include "controller/brokers.h"
#include "controller/desired.h"
#include "controller/minicluster.h"
#include "controller/status.h"
#include "kube/api_path.h"

namespace fcc::controller {
namespace {

kube::Informer::Options WatchOf(std::string name, std::string path,
                                std::string label_selector,
                                const WatchOptions& options) {
  kube::Informer::Options o;
  o.name = std::move(name);
  o.collection_path = std::move(path);
  o.label_selector = std::move(label_selector);
  o.watch_timeout_s = options.watch_timeout_s;
  return o;
}

kube::Informer::Options MiniClusterWatch(const WatchOptions& options) {
  auto o = WatchOf(
      "miniclusters",
      kube::CollectionPath(kApiVersion, kPlural, options.namespace_name), "",
      options);
  o.trim = TrimMiniClusterForCache;
  return o;
}

kube::Informer::Options JobWatch(const WatchOptions& options) {
  // Label-existence selector: only the Jobs the controller made.
  auto o = WatchOf(
      "jobs", kube::CollectionPath("batch/v1", "jobs", options.namespace_name),
      kNameLabel, options);
  o.trim = TrimJobForCache;
  return o;
}

kube::Informer::Options WorkloadWatch(const WatchOptions& options) {
  auto o = WatchOf("kueue workloads",
                   kube::CollectionPath(options.kueue_workload_api, "workloads",
                                        options.namespace_name),
                   options.workload_label_selector, options);
  o.optional = true;  // Kueue is optional
  o.trim = TrimWorkloadForCache;
  return o;
}

// The brokers' pods (the Job controller copies the template's labels), for
// the Degraded condition's message (brokers.h).
kube::Informer::Options PodWatch(const WatchOptions& options) {
  auto o = WatchOf("pods",
                   kube::CollectionPath("v1", "pods", options.namespace_name),
                   kNameLabel, options);
  o.trim = TrimPodForCache;
  return o;
}

}  // namespace

Watches::Watches(const kube::KubeClient& client, const WatchOptions& options)
    : workload_store_(JobUidsOfWorkload),
      miniclusters_(client, MiniClusterWatch(options), minicluster_store_),
      services_(client,
                WatchOf("services",
                        kube::CollectionPath("v1", "services",
                                             options.namespace_name),
                        kNameLabel, options),
                service_store_),
      network_policies_(client,
                        WatchOf("networkpolicies",
                                kube::CollectionPath("networking.k8s.io/v1",
                                                     "networkpolicies",
                                                     options.namespace_name),
                                kNameLabel, options),
                        network_policy_store_),
      jobs_(client, JobWatch(options), job_store_),
      workloads_(client, WorkloadWatch(options), workload_store_),
      pods_(client, PodWatch(options), pod_store_) {}

Watches::~Watches() {
  if (stop_ != nullptr) stop_->Stop();
  for (auto& thread : threads_) thread.join();
}

Caches Watches::caches() const {
  return {minicluster_store_, service_store_,        job_store_,
          workload_store_,    network_policy_store_, pod_store_};
}

bool Watches::HasSynced() const {
  return miniclusters_.HasSynced() && services_.HasSynced() &&
         network_policies_.HasSynced() && jobs_.HasSynced() &&
         workloads_.HasSynced() && pods_.HasSynced();
}

void Watches::Start(common::StopSignal& stop) {
  stop_ = &stop;
  for (kube::Informer* informer :
       {&miniclusters_, &services_, &network_policies_, &jobs_, &workloads_,
        &pods_})
    threads_.emplace_back([informer, &stop] { informer->Run(stop); });
}

}  // namespace fcc::controller
