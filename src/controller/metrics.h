// Prometheus metrics of the controller, under the names controller-runtime
// and client-go give them, so dashboards and alerts written for
// Go controllers work unchanged. Labels hold only the controller and queue
// name, results, HTTP methods and codes and the API server's host: never a
// MiniCluster's name or namespace (unbounded), nor anything secret.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "controller/reconciler.h"
#include "kube/kube_client.h"
#include "kube/work_queue.h"

namespace fcc::controller {

// The controller and work queue name in the labels.
inline constexpr char kControllerName[] = "minicluster";

// controller-runtime's result label: success | error | requeue |
// requeue_after. A name taken by another object is a requeue (the
// controller waits for the user), anything else that retries an error.
std::string ReconcileResultLabel(const ReconcileResult& result);

// "host:port" of an API server URL, client-go's host label.
std::string HostLabel(std::string_view server);

class Metrics final : public ReconcileObserver,
                      public kube::WorkQueueObserver,
                      public kube::RequestObserver {
 public:
  // `queue` (may be null) is read at each scrape; `server` is the API
  // server's URL; `workers` the number of concurrent reconciles.
  Metrics(const kube::WorkQueue* queue, std::string_view server, int workers);

  // Reconciles running now (controller_runtime_active_workers).
  void WorkerStarted() override;
  void ObserveReconcile(const ReconcileResult& result, double seconds) override;
  void WorkerFinished() override;

  void Added() override;
  void Waited(double seconds) override;
  void Worked(double seconds) override;
  void Retried() override;
  void ObserveRequest(std::string_view method, long status,
                      std::optional<double> seconds) override;

  // The text exposition format (what GET /metrics returns).
  std::string Render();

 private:
  void RefreshQueue();

  std::shared_ptr<prometheus::Registry> registry_;
  const kube::WorkQueue* queue_;
  const std::string host_;
  prometheus::Family<prometheus::Counter>& reconcile_total_;
  prometheus::Counter& reconcile_errors_;
  prometheus::Histogram& reconcile_time_;
  prometheus::Gauge& active_workers_;
  prometheus::Gauge& depth_;
  prometheus::Counter& adds_;
  prometheus::Histogram& queue_duration_;
  prometheus::Histogram& work_duration_;
  prometheus::Gauge& unfinished_work_;
  prometheus::Gauge& longest_running_;
  prometheus::Counter& retries_;
  prometheus::Family<prometheus::Counter>& requests_total_;
  prometheus::Family<prometheus::Histogram>& request_duration_;
};

}  // namespace fcc::controller
