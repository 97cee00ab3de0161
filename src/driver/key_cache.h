// Rendered certs per MiniCluster, derived once per node and kept only while a
// volume on this node uses them.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>

#include "curve/keys.h"
#include "curve/minicluster_cert.h"
#include "curve/secret.h"
#include "driver/key_ring.h"

namespace fcc::driver {

// Publisher names the cert by this name.
using curve::MiniClusterCert;

// A derivation that failed. The message names the MiniCluster and the cause,
// never key material.
class KeyDerivationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A publish that names a master key this node does not have. The message
// names the id and the fix.
class MissingKeyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class KeyCache {
 public:
  // How a cert is made; tests substitute a failing one.
  using Derive = std::function<MiniClusterCert(const curve::Secret& master_key,
                                               const curve::MiniClusterId&)>;

  explicit KeyCache(std::shared_ptr<KeyRing> ring,
                    Derive derive = curve::MakeMiniClusterCert);
  // A ring of one default key.
  explicit KeyCache(curve::Secret master_key,
                    Derive derive = curve::MakeMiniClusterCert);

  struct Lease {
    std::shared_ptr<const MiniClusterCert> cert;
    // True if this call started `volume_id`'s use of the cert; a failed
    // publish then gives it back with Release.
    bool newly_acquired = false;
    // True if `volume_id` already counted for another MiniCluster (a
    // re-publish with other attributes): the publish's outcome then goes to
    // Settle instead.
    bool other_minicluster = false;
    // The cache entry: the key's id and version and the MiniCluster.
    std::string entry;
  };

  // The cert for `id` from master key `key_id` ("" names the default key),
  // recording that `volume_id` uses it. Derives on the first use per
  // MiniCluster and key (its id and bytes: an id whose bytes changed derives
  // anew); later calls are cache hits, including calls that
  // arrive while that first derivation runs (they wait for it). Throws
  // MissingKeyError if the ring has no such key, KeyDerivationError if the
  // derivation fails (to every waiter; the next call derives afresh).
  Lease Acquire(const std::string& volume_id, const curve::MiniClusterId& id,
                std::string_view key_id = "");
  // Ends `volume_id`'s use; a cert no volume uses is dropped (and wiped).
  // Unknown volume IDs (e.g. mounted before a restart) are ignored.
  void Release(const std::string& volume_id);
  // For an other_minicluster lease: after a successful publish the volume
  // counts for the lease's MiniCluster instead; after a failed one it keeps
  // its own, and the lease's cert is dropped unless another volume uses it.
  void Settle(const std::string& volume_id, const Lease& lease, bool published);

  struct Stats {
    uint64_t hits = 0;
    uint64_t misses = 0;  // derivations
    size_t miniclusters = 0;
    size_t volumes = 0;
    // Volumes per master key id (the keys' own ids, the default's included).
    std::map<std::string, size_t> volumes_by_key;
  };
  Stats GetStats() const;
  KeyRing& ring() const { return *ring_; }

 private:
  using CertPtr = std::shared_ptr<const MiniClusterCert>;
  struct Entry {
    // Ready once the first caller's derivation is done.
    std::shared_future<CertPtr> cert;
    const void* deriver = nullptr;  // who fulfils `cert` (identity only)
    std::string key_id;
    size_t volumes = 0;
  };
  // What Claim found: the cert to wait for, and whether this caller derives.
  struct Claimed {
    std::shared_future<CertPtr> cert;
    bool inserted = false;
    bool other = false;  // the volume counts for another MiniCluster
    bool derive = false;
  };
  // One volume fewer for `key`; its cert is dropped when none is left.
  void DropVolumeLocked(const std::string& key);
  Claimed Claim(const std::string& volume_id, const std::string& key,
                const std::string& key_id, std::promise<CertPtr>& derived);
  void DeriveInto(std::promise<CertPtr>& derived, const std::string& key,
                  const curve::MiniClusterId& id, const RingKey& master_key);
  // Hands `derived`'s waiters the failure and drops the entry.
  void Fail(std::promise<CertPtr>& derived, const std::string& key,
            const curve::MiniClusterId& id, std::string_view why);

  const std::shared_ptr<KeyRing> ring_;
  const Derive derive_;
  mutable std::mutex mu_;
  // Key id and derivation info → entry.
  std::unordered_map<std::string, Entry> by_minicluster_;
  std::unordered_map<std::string, std::string> by_volume_;  // volume → info
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

}  // namespace fcc::driver
