#include "controller/metrics.h"

#include <gtest/gtest.h>

#include <sstream>

namespace fcc::controller {
namespace {

// The value of `series` (name and labels, as exposed) in `text`; -1 if it
// is not there.
double Value(const std::string& text, const std::string& series) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with(series + " "))
      return std::stod(line.substr(series.size()));
  }
  return -1;
}

constexpr char kTotal[] = "controller_runtime_reconcile_total";
std::string Result(const std::string& result) {
  return std::string(kTotal) + "{controller=\"minicluster\",result=\"" +
         result + "\"}";
}
constexpr char kQueue[] = "{controller=\"minicluster\",name=\"minicluster\"}";

TEST(ControllerMetrics, ResultLabelsFollowControllerRuntime) {
  EXPECT_EQ(ReconcileResultLabel(ReconcileResult::Done()), "success");
  EXPECT_EQ(ReconcileResultLabel(
                ReconcileResult::Retry(RetryReason::kJobNameTaken, "")),
            "requeue");
  EXPECT_EQ(ReconcileResultLabel(
                ReconcileResult::Retry(RetryReason::kServiceNameTaken, "")),
            "requeue");
  EXPECT_EQ(ReconcileResultLabel(
                ReconcileResult::Retry(RetryReason::kWriteFailed, "")),
            "error");
  EXPECT_EQ(ReconcileResultLabel(
                ReconcileResult::Retry(RetryReason::kUnexpectedError, "")),
            "error");
}

TEST(ControllerMetrics, HostLabelIsHostAndPort) {
  EXPECT_EQ(HostLabel("https://127.0.0.1:6443"), "127.0.0.1:6443");
  EXPECT_EQ(HostLabel("https://api.example:443/prefix"), "api.example:443");
  EXPECT_EQ(HostLabel("10.0.0.1:6443"), "10.0.0.1:6443");
}

TEST(ControllerMetrics, ReconcilesByResultWithErrorsAndLatency) {
  Metrics metrics(nullptr, "https://127.0.0.1:6443", 2);
  std::string text = metrics.Render();
  // Every result from the start, at 0.
  for (const char* r : {"success", "error", "requeue", "requeue_after"})
    EXPECT_EQ(Value(text, Result(r)), 0) << r;
  metrics.ObserveReconcile(ReconcileResult::Done(), 0.02);
  metrics.ObserveReconcile(ReconcileResult::Done(), 0.03);
  metrics.ObserveReconcile(
      ReconcileResult::Retry(RetryReason::kWriteFailed, "x"), 0.5);
  metrics.ObserveReconcile(
      ReconcileResult::Retry(RetryReason::kJobNameTaken, "x"), 0.01);
  text = metrics.Render();
  EXPECT_EQ(Value(text, Result("success")), 2);
  EXPECT_EQ(Value(text, Result("error")), 1);
  EXPECT_EQ(Value(text, Result("requeue")), 1);
  EXPECT_EQ(Value(text,
                  "controller_runtime_reconcile_errors_total{controller="
                  "\"minicluster\"}"),
            1);
  EXPECT_EQ(Value(text,
                  "controller_runtime_reconcile_time_seconds_count{"
                  "controller=\"minicluster\"}"),
            4);
  EXPECT_EQ(Value(text,
                  "controller_runtime_max_concurrent_reconciles{"
                  "controller=\"minicluster\"}"),
            2);
}

TEST(ControllerMetrics, WorkQueueAddsDepthDurationsAndRetries) {
  kube::WorkQueue queue;
  Metrics metrics(&queue, "https://127.0.0.1:6443", 2);
  queue.set_observer(&metrics);
  queue.Add("science/a");
  queue.Add("science/a");  // de-duplicated: one add
  queue.Add("science/b");
  std::string text = metrics.Render();
  EXPECT_EQ(Value(text, std::string("workqueue_adds_total") + kQueue), 2);
  EXPECT_EQ(Value(text, std::string("workqueue_depth") + kQueue), 2);
  const auto key = queue.Get();
  ASSERT_TRUE(key);
  text = metrics.Render();
  EXPECT_EQ(Value(text, std::string("workqueue_depth") + kQueue), 1);
  EXPECT_EQ(Value(text, std::string("workqueue_queue_duration_seconds_count") +
                            kQueue),
            1);
  EXPECT_GE(
      Value(text, std::string("workqueue_longest_running_processor_seconds") +
                      kQueue),
      0);
  EXPECT_TRUE(queue.InProgressWork().longest_seconds >= 0);
  queue.AddRateLimited(*key);
  queue.Done(*key);
  text = metrics.Render();
  EXPECT_EQ(Value(text, std::string("workqueue_retries_total") + kQueue), 1);
  EXPECT_EQ(Value(text, std::string("workqueue_work_duration_seconds_count") +
                            kQueue),
            1);
  EXPECT_EQ(
      Value(text, std::string("workqueue_unfinished_work_seconds") + kQueue),
      0);
  // Keys (MiniCluster names) never become labels.
  EXPECT_EQ(text.find("science"), std::string::npos);
}

TEST(ControllerMetrics, RestClientRequestsByCodeMethodAndHost) {
  Metrics metrics(nullptr, "https://127.0.0.1:6443", 1);
  metrics.ObserveRequest("GET", 200, 0.01);
  metrics.ObserveRequest("GET", 200, 0.02);
  metrics.ObserveRequest("PATCH", 409, 0.01);
  metrics.ObserveRequest("POST", 0, 1.0);            // no response
  metrics.ObserveRequest("GET", 200, std::nullopt);  // a watch ended
  const std::string text = metrics.Render();
  auto requests = [&](const std::string& code, const std::string& method) {
    return Value(text, "rest_client_requests_total{code=\"" + code +
                           "\",host=\"127.0.0.1:6443\",method=\"" + method +
                           "\"}");
  };
  EXPECT_EQ(requests("200", "GET"), 3);
  EXPECT_EQ(requests("409", "PATCH"), 1);
  EXPECT_EQ(requests("<error>", "POST"), 1);
  EXPECT_EQ(Value(text,
                  "rest_client_request_duration_seconds_count{host=\""
                  "127.0.0.1:6443\",verb=\"GET\"}"),
            2);
}

}  // namespace
}  // namespace fcc::controller
