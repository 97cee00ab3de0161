#include "driver/metrics.h"

#include <prometheus/text_serializer.h>

namespace fcc::driver {
namespace {

using Seconds = std::chrono::duration<double>;

// Publish is a tmpfs mount plus a file write: sub-millisecond to tens of
// milliseconds; slower means a struggling node.
const prometheus::Histogram::BucketBoundaries kLatencyBuckets = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1,    0.25,  0.5,    1,     2.5,  5,     10};

constexpr std::array<std::string_view, 17> kCodeNames = {"OK",
                                                         "CANCELLED",
                                                         "UNKNOWN",
                                                         "INVALID_ARGUMENT",
                                                         "DEADLINE_EXCEEDED",
                                                         "NOT_FOUND",
                                                         "ALREADY_EXISTS",
                                                         "PERMISSION_DENIED",
                                                         "RESOURCE_EXHAUSTED",
                                                         "FAILED_PRECONDITION",
                                                         "ABORTED",
                                                         "OUT_OF_RANGE",
                                                         "UNIMPLEMENTED",
                                                         "INTERNAL",
                                                         "UNAVAILABLE",
                                                         "DATA_LOSS",
                                                         "UNAUTHENTICATED"};

size_t CodeIndex(grpc::StatusCode code) {
  const auto i = static_cast<size_t>(code);
  return i < kCodeNames.size() ? i : static_cast<size_t>(grpc::UNKNOWN);
}

}  // namespace

Metrics::Rpc::Rpc(prometheus::Registry& registry, const std::string& name,
                  const std::string& help)
    : totals(prometheus::BuildCounter()
                 .Name("flux_curve_csi_" + name + "_total")
                 .Help(help + " calls by result and gRPC code")
                 .Register(registry)),
      latency(prometheus::BuildHistogram()
                  .Name("flux_curve_csi_" + name + "_duration_seconds")
                  .Help(help + " latency, all results")
                  .Register(registry)
                  .Add({}, kLatencyBuckets)) {}

void Metrics::Rpc::Observe(grpc::StatusCode code,
                           std::chrono::steady_clock::duration elapsed) {
  const size_t i = CodeIndex(code);
  prometheus::Counter* counter = by_code[i].load(std::memory_order_acquire);
  if (counter == nullptr) {
    // Add returns the same series for the same labels, so a race is benign.
    counter = &totals.Add({{"result", i == 0 ? "success" : "error"},
                           {"code", std::string(kCodeNames[i])}});
    by_code[i].store(counter, std::memory_order_release);
  }
  counter->Increment();
  latency.Observe(std::chrono::duration_cast<Seconds>(elapsed).count());
}

Metrics::Metrics(const KeyCache* keys, const Publisher* publisher)
    : registry_(std::make_shared<prometheus::Registry>()),
      publish_(*registry_, "node_publish", "NodePublishVolume"),
      unpublish_(*registry_, "node_unpublish", "NodeUnpublishVolume"),
      keys_(keys),
      miniclusters_cached_(
          prometheus::BuildGauge()
              .Name("flux_curve_csi_miniclusters_cached")
              .Help("MiniClusters whose cert is held in memory on this node")
              .Register(*registry_)
              .Add({})),
      volumes_cached_(prometheus::BuildGauge()
                          .Name("flux_curve_csi_volumes_cached")
                          .Help("Volumes using a cached cert on this node")
                          .Register(*registry_)
                          .Add({})),
      cache_hits_(prometheus::BuildCounter()
                      .Name("flux_curve_csi_key_cache_hits_total")
                      .Help("Publishes served from the key cache")
                      .Register(*registry_)
                      .Add({})),
      cache_misses_(prometheus::BuildCounter()
                        .Name("flux_curve_csi_key_cache_misses_total")
                        .Help("Key derivations (first volume of a "
                              "MiniCluster on this node)")
                        .Register(*registry_)
                        .Add({})),
      publisher_(publisher),
      volumes_(prometheus::BuildGauge()
                   .Name("flux_curve_csi_volumes")
                   .Help("Volumes on this node, counted against "
                         "--max-volumes-per-node (those mounted before a "
                         "restart included)")
                   .Register(*registry_)
                   .Add({})),
      max_volumes_(prometheus::BuildGauge()
                       .Name("flux_curve_csi_max_volumes_per_node")
                       .Help("--max-volumes-per-node: publishes past it are "
                             "RESOURCE_EXHAUSTED")
                       .Register(*registry_)
                       .Add({})),
      master_keys_(prometheus::BuildGauge()
                       .Name("flux_curve_csi_master_key")
                       .Help("1 for each master key this node has loaded, "
                             "by key_id (default=\"true\" for the key of "
                             "volumes without a key-id)")
                       .Register(*registry_)),
      volumes_by_key_(prometheus::BuildGauge()
                          .Name("flux_curve_csi_volumes_by_key")
                          .Help("Volumes published by this driver process, "
                                "by the master key their cert comes from")
                          .Register(*registry_)),
      volumes_key_unknown_(
          prometheus::BuildGauge()
              .Name("flux_curve_csi_volumes_key_unknown")
              .Help("Volumes mounted before the driver's last restart: "
                    "their master key cannot be told from the node")
              .Register(*registry_)
              .Add({})),
      master_key_reload_failing_(
          prometheus::BuildGauge()
              .Name("flux_curve_csi_master_key_reload_failing")
              .Help("1 while the master key Secret volume cannot be read: "
                    "the keys loaded before stay in use (the log says why)")
              .Register(*registry_)
              .Add({})) {}

void Metrics::ObserveRpc(CountedRpc rpc, grpc::StatusCode code,
                         std::chrono::steady_clock::duration elapsed) {
  switch (rpc) {
    case CountedRpc::kPublish:
      publish_.Observe(code, elapsed);
      break;
    case CountedRpc::kUnpublish:
      unpublish_.Observe(code, elapsed);
      break;
    case CountedRpc::kNone:
      break;
  }
}

void Metrics::RefreshKeyCache() {
  if (keys_ == nullptr) return;
  const KeyCache::Stats stats = keys_->GetStats();
  RefreshKeyRing(stats);
  std::lock_guard lock(refresh_mu_);
  miniclusters_cached_.Set(static_cast<double>(stats.miniclusters));
  volumes_cached_.Set(static_cast<double>(stats.volumes));
  // KeyCache keeps running totals; counters only move forward.
  if (stats.hits > seen_hits_) {
    cache_hits_.Increment(static_cast<double>(stats.hits - seen_hits_));
    seen_hits_ = stats.hits;
  }
  if (stats.misses > seen_misses_) {
    cache_misses_.Increment(static_cast<double>(stats.misses - seen_misses_));
    seen_misses_ = stats.misses;
  }
}

void Metrics::RefreshVolumes() {
  if (publisher_ == nullptr) return;
  volumes_.Set(static_cast<double>(publisher_->CountStats().volumes));
  max_volumes_.Set(static_cast<double>(publisher_->caps().per_node));
}

void Metrics::SetByKey(prometheus::Family<prometheus::Gauge>& family,
                       std::map<std::string, prometheus::Gauge*>& gauges,
                       const std::map<std::string, double>& values,
                       const std::optional<std::string>& default_id) {
  for (auto it = gauges.begin(); it != gauges.end();) {
    if (values.contains(it->first)) {
      ++it;
      continue;
    }
    family.Remove(it->second);
    it = gauges.erase(it);
  }
  for (const auto& [id, value] : values) {
    auto [it, created] = gauges.try_emplace(id, nullptr);
    if (created) {
      std::map<std::string, std::string> labels{{"key_id", id}};
      if (default_id) labels["default"] = id == *default_id ? "true" : "false";
      it->second = &family.Add(labels);
    }
    it->second->Set(value);
  }
}

void Metrics::RefreshKeyRing(const KeyCache::Stats& stats) {
  KeyRing& ring = keys_->ring();
  ring.Refresh();
  std::map<std::string, double> loaded;
  for (const auto& id : ring.Ids()) loaded[id] = 1;
  std::map<std::string, double> volumes;
  size_t known = 0;
  for (const auto& [id, count] : stats.volumes_by_key) {
    volumes[id] = static_cast<double>(count);
    known += count;
  }
  std::lock_guard lock(refresh_mu_);
  SetByKey(master_keys_, master_key_gauges_, loaded, ring.default_id());
  master_key_reload_failing_.Set(ring.ReloadError().empty() ? 0.0 : 1.0);
  SetByKey(volumes_by_key_, volumes_by_key_gauges_, volumes, std::nullopt);
  if (publisher_ != nullptr) {
    const size_t all = publisher_->CountStats().volumes;
    volumes_key_unknown_.Set(all > known ? static_cast<double>(all - known)
                                         : 0.0);
  }
}

std::string Metrics::Render() {
  RefreshKeyCache();
  RefreshVolumes();
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace fcc::driver
