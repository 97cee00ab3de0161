// Rendered certs per MiniCluster, derived once per node and kept only while a
// volume on this node uses them.
#pragma once

#include <atomic>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "curve/keys.h"
#include "curve/secret.h"

namespace fcc::driver {

// The cert a MiniCluster gets: its bytes are what every node writes.
struct MiniClusterCert {
  curve::MiniClusterId id;
  std::string public_z85;  // not secret; for logs and checks
  curve::Secret text;      // the whole curve.cert file
};

// Pure: the cert for `id` under `master_key`.
MiniClusterCert MakeMiniClusterCert(const curve::Secret& master_key,
                                    const curve::MiniClusterId& id);

class KeyCache {
 public:
  explicit KeyCache(curve::Secret master_key);

  struct Lease {
    std::shared_ptr<const MiniClusterCert> cert;
    // True if this call started `volume_id`'s use of the cert; a failed
    // publish then gives it back with Release.
    bool newly_acquired = false;
  };

  // The cert for `id`, recording that `volume_id` uses it. Derives on the
  // first use per MiniCluster; later calls are cache hits, including calls
  // that arrive while that first derivation runs (they wait for it).
  Lease Acquire(const std::string& volume_id, const curve::MiniClusterId& id);
  // Ends `volume_id`'s use; a cert no volume uses is dropped (and wiped).
  // Unknown volume IDs (e.g. mounted before a restart) are ignored.
  void Release(const std::string& volume_id);

  struct Stats {
    uint64_t hits = 0;
    uint64_t misses = 0;  // derivations
    size_t miniclusters = 0;
    size_t volumes = 0;
  };
  Stats GetStats() const;

 private:
  using CertPtr = std::shared_ptr<const MiniClusterCert>;
  struct Entry {
    // Ready once the first caller's derivation is done.
    std::shared_future<CertPtr> cert;
    const void* deriver = nullptr;  // who fulfils `cert` (identity only)
    size_t volumes = 0;
  };
  const curve::Secret master_key_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> by_minicluster_;   // info → entry
  std::unordered_map<std::string, std::string> by_volume_;  // volume → info
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

}  // namespace fcc::driver
