#include "driver/key_cache.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <exception>

namespace fcc::driver {
namespace {

// One entry per MiniCluster and master key, by id and bytes ('@' and '/'
// are in no key id).
std::string CacheKey(const RingKey& key, const curve::MiniClusterId& id) {
  return fmt::format("{}@{}/{}", key.id, key.version,
                     curve::DerivationInfo(id));
}

}  // namespace

KeyCache::KeyCache(std::shared_ptr<KeyRing> ring, Derive derive)
    : ring_(std::move(ring)), derive_(std::move(derive)) {}

KeyCache::KeyCache(curve::Secret master_key, Derive derive)
    : KeyCache(KeyRing::Fixed(std::move(master_key)), std::move(derive)) {}

KeyCache::Lease KeyCache::Acquire(const std::string& volume_id,
                                  const curve::MiniClusterId& id,
                                  std::string_view key_id) {
  // Asked every publish: a key added or removed since shows at once.
  auto master_key = ring_->Find(key_id);
  if (!master_key) throw MissingKeyError(master_key.error());
  const std::string key = CacheKey(*master_key, id);
  std::promise<CertPtr> derived;
  const Claimed claimed = Claim(volume_id, key, master_key->id, derived);
  // Derive outside the lock: other MiniClusters' publishes go on meanwhile.
  if (claimed.derive) DeriveInto(derived, key, id, *master_key);
  // get() rethrows a failure.
  return {claimed.cert.get(), claimed.inserted, claimed.other, key};
}

KeyCache::Claimed KeyCache::Claim(const std::string& volume_id,
                                  const std::string& key,
                                  const std::string& key_id,
                                  std::promise<CertPtr>& derived) {
  std::lock_guard lock(mu_);
  Claimed claimed;
  auto [it, created] = by_minicluster_.try_emplace(key);
  if (created) {
    // Single flight: concurrent first publishes of one MiniCluster (a Job's
    // pods landing together) wait for one derivation, not one each.
    it->second.cert = derived.get_future().share();
    it->second.deriver = &derived;
    it->second.key_id = key_id;
    claimed.derive = true;
    ++misses_;
  } else {
    ++hits_;
  }
  const auto [volume, inserted] = by_volume_.emplace(volume_id, key);
  claimed.inserted = inserted;
  claimed.other = !inserted && volume->second != key;
  if (inserted) ++it->second.volumes;
  claimed.cert = it->second.cert;
  return claimed;
}

void KeyCache::DeriveInto(std::promise<CertPtr>& derived,
                          const std::string& key,
                          const curve::MiniClusterId& id,
                          const RingKey& master_key) {
  try {
    auto made = std::make_shared<const MiniClusterCert>(
        derive_(*master_key.secret, id));
    // Once per MiniCluster per node: operators (and driver_bench) count
    // these to see the cache work. The public key is not secret.
    spdlog::info(
        "derived the key of MiniCluster {} from master key {} (public-key {})",
        id.QualifiedName(), master_key.id, made->public_z85);
    derived.set_value(std::move(made));
  } catch (const std::exception& e) {
    Fail(derived, key, id, e.what());
  } catch (...) {
    Fail(derived, key, id, "unknown error");
  }
}

void KeyCache::Fail(std::promise<CertPtr>& derived, const std::string& key,
                    const curve::MiniClusterId& id, std::string_view why) {
  // curve/ throws fixed texts (and names), never key material.
  derived.set_exception(std::make_exception_ptr(KeyDerivationError(
      fmt::format("cannot derive the key of MiniCluster {}: {}",
                  id.QualifiedName(), why))));
  // Waiters see the same failure; the next publish derives afresh.
  std::lock_guard lock(mu_);
  auto it = by_minicluster_.find(key);
  if (it == by_minicluster_.end() || it->second.deriver != &derived) return;
  for (auto vol = by_volume_.begin(); vol != by_volume_.end();) {
    vol = vol->second == key ? by_volume_.erase(vol) : std::next(vol);
  }
  by_minicluster_.erase(it);
}

void KeyCache::DropVolumeLocked(const std::string& key) {
  auto it = by_minicluster_.find(key);
  if (it != by_minicluster_.end() && --it->second.volumes == 0) {
    by_minicluster_.erase(it);
  }
}

void KeyCache::Release(const std::string& volume_id) {
  std::lock_guard lock(mu_);
  auto vol = by_volume_.find(volume_id);
  if (vol == by_volume_.end()) return;
  const std::string key = std::move(vol->second);
  by_volume_.erase(vol);
  DropVolumeLocked(key);
}

void KeyCache::Settle(const std::string& volume_id, const Lease& lease,
                      bool published) {
  const std::string& key = lease.entry;
  std::lock_guard lock(mu_);
  auto it = by_minicluster_.find(key);
  if (!published) {
    if (it != by_minicluster_.end() && it->second.volumes == 0) {
      by_minicluster_.erase(it);
    }
    return;
  }
  auto [volume, inserted] = by_volume_.try_emplace(volume_id, key);
  if (!inserted) {
    if (volume->second == key) return;
    DropVolumeLocked(volume->second);
    volume->second = key;
  }
  if (it != by_minicluster_.end()) ++it->second.volumes;
}

KeyCache::Stats KeyCache::GetStats() const {
  std::lock_guard lock(mu_);
  Stats stats{hits_, misses_, by_minicluster_.size(), by_volume_.size(), {}};
  for (const auto& [key, entry] : by_minicluster_) {
    stats.volumes_by_key[entry.key_id] += entry.volumes;
  }
  return stats;
}

}  // namespace fcc::driver
