// Prometheus metrics of the node driver. Labels hold only RPC outcomes
// (gRPC codes); never volume attributes, paths, names or keys.
#pragma once

#include <grpcpp/support/status.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "driver/key_cache.h"
#include "driver/publisher.h"
#include "driver/rpc.h"

namespace fcc::driver {

class Metrics final : public RpcObserver {
 public:
  // `keys` (may be null) is read at each scrape for the key cache metrics,
  // `publisher` (may be null) for the volumes held against the node's cap.
  explicit Metrics(const KeyCache* keys, const Publisher* publisher = nullptr);

  void ObserveRpc(CountedRpc rpc, grpc::StatusCode code,
                  std::chrono::steady_clock::duration elapsed) override;

  // The text exposition format (what GET /metrics returns).
  std::string Render();

 private:
  // One RPC's counters by code (created on first use) and its latencies.
  struct Rpc {
    Rpc(prometheus::Registry& registry, const std::string& name,
        const std::string& help);
    void Observe(grpc::StatusCode code,
                 std::chrono::steady_clock::duration elapsed);
    prometheus::Family<prometheus::Counter>& totals;
    prometheus::Histogram& latency;
    // Family::Add locks the family; the hot path reads the cached pointer.
    std::array<std::atomic<prometheus::Counter*>, 17> by_code{};
  };

  void RefreshKeyCache();
  void RefreshVolumes();
  // The ring's keys and the volumes per key: one gauge per key id, removed
  // when the id goes.
  void RefreshKeyRing(const KeyCache::Stats& stats);
  // A gauge of `family` per key id in `values`; with `default_id`, each also
  // says whether it is that key (label default).
  void SetByKey(prometheus::Family<prometheus::Gauge>& family,
                std::map<std::string, prometheus::Gauge*>& gauges,
                const std::map<std::string, double>& values,
                const std::optional<std::string>& default_id);

  std::shared_ptr<prometheus::Registry> registry_;
  Rpc publish_;
  Rpc unpublish_;
  const KeyCache* keys_;
  prometheus::Gauge& miniclusters_cached_;
  prometheus::Gauge& volumes_cached_;
  prometheus::Counter& cache_hits_;
  prometheus::Counter& cache_misses_;
  const Publisher* publisher_;
  prometheus::Gauge& volumes_;
  prometheus::Gauge& max_volumes_;
  prometheus::Family<prometheus::Gauge>& master_keys_;
  prometheus::Family<prometheus::Gauge>& volumes_by_key_;
  prometheus::Gauge& volumes_key_unknown_;
  prometheus::Gauge& master_key_reload_failing_;
  std::map<std::string, prometheus::Gauge*> master_key_gauges_;
  std::map<std::string, prometheus::Gauge*> volumes_by_key_gauges_;
  std::mutex refresh_mu_;  // scrapes turn KeyCache's totals into increments
  uint64_t seen_hits_ = 0;
  uint64_t seen_misses_ = 0;
};

}  // namespace fcc::driver
