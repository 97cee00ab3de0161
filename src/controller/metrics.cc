#include "controller/metrics.h"

#include <prometheus/text_serializer.h>

namespace fcc::controller {
namespace {

using prometheus::Histogram;

// controller-runtime's controller_runtime_reconcile_time_seconds buckets.
const Histogram::BucketBoundaries kReconcileBuckets = {
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3,  0.35,
    0.4,   0.45, 0.5,   0.6,  0.7, 0.8,  0.9, 1.0,  1.25, 1.5,
    1.75,  2.0,  2.5,   3.0,  3.5, 4.0,  4.5, 5,    6,    7,
    8,     9,    10,    15,   20,  25,   30,  40,   50,   60};

// client-go's workqueue buckets: 10 ns to 1,000 s, factor 10.
const Histogram::BucketBoundaries kQueueBuckets = {
    1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1, 10, 100, 1000};

// client-go's rest_client_request_duration_seconds buckets.
const Histogram::BucketBoundaries kRequestBuckets = {
    0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60};

const prometheus::Labels kController = {{"controller", kControllerName}};
const prometheus::Labels kQueue = {{"name", kControllerName},
                                   {"controller", kControllerName}};

prometheus::Counter& Counter(prometheus::Registry& r, const std::string& name,
                             const std::string& help,
                             const prometheus::Labels& labels) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add(
      labels);
}

prometheus::Gauge& Gauge(prometheus::Registry& r, const std::string& name,
                         const std::string& help,
                         const prometheus::Labels& labels) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add(labels);
}

Histogram& Hist(prometheus::Registry& r, const std::string& name,
                const std::string& help, const prometheus::Labels& labels,
                const Histogram::BucketBoundaries& buckets) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(r).Add(
      labels, buckets);
}

}  // namespace

std::string ReconcileResultLabel(const ReconcileResult& result) {
  switch (result.reason) {
    case RetryReason::kNone:
      return result.after ? "requeue_after" : "success";
    case RetryReason::kJobNameTaken:
    case RetryReason::kServiceNameTaken:
      return "requeue";
    default:
      return "error";
  }
}

std::string HostLabel(std::string_view server) {
  if (const auto scheme = server.find("://"); scheme != server.npos)
    server.remove_prefix(scheme + 3);
  return std::string(server.substr(0, server.find('/')));
}

Metrics::Metrics(const kube::WorkQueue* queue, std::string_view server,
                 int workers)
    : registry_(std::make_shared<prometheus::Registry>()),
      queue_(queue),
      host_(HostLabel(server)),
      reconcile_total_(prometheus::BuildCounter()
                           .Name("controller_runtime_reconcile_total")
                           .Help("Total number of reconciliations per "
                                 "controller")
                           .Register(*registry_)),
      reconcile_errors_(Counter(
          *registry_, "controller_runtime_reconcile_errors_total",
          "Total number of reconciliation errors per controller", kController)),
      reconcile_time_(Hist(*registry_,
                           "controller_runtime_reconcile_time_seconds",
                           "Length of time per reconciliation per controller",
                           kController, kReconcileBuckets)),
      active_workers_(Gauge(*registry_, "controller_runtime_active_workers",
                            "Number of currently used workers per controller",
                            kController)),
      depth_(Gauge(*registry_, "workqueue_depth", "Current depth of workqueue",
                   kQueue)),
      adds_(Counter(*registry_, "workqueue_adds_total",
                    "Total number of adds handled by workqueue", kQueue)),
      queue_duration_(Hist(*registry_, "workqueue_queue_duration_seconds",
                           "How long in seconds an item stays in workqueue "
                           "before being requested",
                           kQueue, kQueueBuckets)),
      work_duration_(Hist(*registry_, "workqueue_work_duration_seconds",
                          "How long in seconds processing an item from "
                          "workqueue takes",
                          kQueue, kQueueBuckets)),
      unfinished_work_(Gauge(*registry_, "workqueue_unfinished_work_seconds",
                             "How many seconds of work has been done that is "
                             "in progress and hasn't been observed by "
                             "work_duration",
                             kQueue)),
      longest_running_(
          Gauge(*registry_, "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for "
                "workqueue been running",
                kQueue)),
      retries_(Counter(*registry_, "workqueue_retries_total",
                       "Total number of retries handled by workqueue", kQueue)),
      requests_total_(prometheus::BuildCounter()
                          .Name("rest_client_requests_total")
                          .Help("Number of HTTP requests, partitioned by "
                                "status code, method, and host")
                          .Register(*registry_)),
      request_duration_(prometheus::BuildHistogram()
                            .Name("rest_client_request_duration_seconds")
                            .Help("Request latency in seconds, by verb and "
                                  "host")
                            .Register(*registry_)) {
  Gauge(*registry_, "controller_runtime_max_concurrent_reconciles",
        "Maximum number of concurrent reconciles per controller", kController)
      .Set(workers);
  // Every result from the start, as controller-runtime does, so rate()
  // sees the first one.
  for (const char* result : {"success", "error", "requeue", "requeue_after"})
    reconcile_total_.Add({{"controller", kControllerName}, {"result", result}});
}

void Metrics::ObserveReconcile(const ReconcileResult& result, double seconds) {
  const std::string label = ReconcileResultLabel(result);
  reconcile_total_.Add({{"controller", kControllerName}, {"result", label}})
      .Increment();
  if (label == "error") reconcile_errors_.Increment();
  reconcile_time_.Observe(seconds);
}

void Metrics::WorkerStarted() { active_workers_.Increment(); }
void Metrics::WorkerFinished() { active_workers_.Decrement(); }

void Metrics::Added() { adds_.Increment(); }
void Metrics::Waited(double seconds) { queue_duration_.Observe(seconds); }
void Metrics::Worked(double seconds) { work_duration_.Observe(seconds); }
void Metrics::Retried() { retries_.Increment(); }

void Metrics::ObserveRequest(std::string_view method, long status,
                             std::optional<double> seconds) {
  // client-go's code for a request that got no response.
  const std::string code = status == 0 ? "<error>" : std::to_string(status);
  requests_total_
      .Add({{"code", code}, {"method", std::string(method)}, {"host", host_}})
      .Increment();
  if (seconds) {
    request_duration_
        .Add({{"verb", std::string(method)}, {"host", host_}}, kRequestBuckets)
        .Observe(*seconds);
  }
}

void Metrics::RefreshQueue() {
  if (queue_ == nullptr) return;
  depth_.Set(static_cast<double>(queue_->Len()));
  const kube::WorkQueue::InProgress work = queue_->InProgressWork();
  unfinished_work_.Set(work.unfinished_seconds);
  longest_running_.Set(work.longest_seconds);
}

std::string Metrics::Render() {
  RefreshQueue();
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace fcc::controller
