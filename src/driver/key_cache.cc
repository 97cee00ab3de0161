#include "driver/key_cache.h"

#include <spdlog/spdlog.h>

#include "curve/cert.h"

namespace fcc::driver {

MiniClusterCert MakeMiniClusterCert(const curve::Secret& master_key,
                                    const curve::MiniClusterId& id) {
  const curve::CurveKeypair keys = curve::DeriveKeypair(master_key, id);
  return MiniClusterCert{.id = id,
                         .public_z85 = keys.public_z85,
                         .text = curve::RenderCert(id.QualifiedName(), keys)};
}

KeyCache::KeyCache(curve::Secret master_key)
    : master_key_(std::move(master_key)) {}

KeyCache::Lease KeyCache::Acquire(const std::string& volume_id,
                                  const curve::MiniClusterId& id) {
  const std::string key = curve::DerivationInfo(id);
  {
    std::lock_guard lock(mu_);
    if (auto it = by_minicluster_.find(key); it != by_minicluster_.end()) {
      ++hits_;
      const auto [vol, inserted] = by_volume_.emplace(volume_id, key);
      if (inserted) ++it->second.volumes;
      return {it->second.cert, inserted};
    }
  }
  // Derive outside the lock: other MiniClusters' publishes go on meanwhile.
  auto cert = std::make_shared<const MiniClusterCert>(
      MakeMiniClusterCert(master_key_, id));
  // Once per MiniCluster per node: operators (and driver_bench) count these
  // to see the cache work. The public key is not secret.
  spdlog::info("derived the key of MiniCluster {} (public-key {})",
               id.QualifiedName(), cert->public_z85);
  std::lock_guard lock(mu_);
  ++misses_;
  const auto [vol, inserted] = by_volume_.try_emplace(volume_id, key);
  if (!inserted && vol->second != key) {
    // The volume already uses another MiniCluster's cert (the publish will
    // be refused as ALREADY_EXISTS): do not keep an entry no volume counts.
    return {std::move(cert), false};
  }
  auto [it, created] = by_minicluster_.try_emplace(key, Entry{cert, 0});
  if (inserted) ++it->second.volumes;
  return {it->second.cert, inserted};
}

void KeyCache::Release(const std::string& volume_id) {
  std::lock_guard lock(mu_);
  auto vol = by_volume_.find(volume_id);
  if (vol == by_volume_.end()) return;
  auto it = by_minicluster_.find(vol->second);
  by_volume_.erase(vol);
  if (it != by_minicluster_.end() && --it->second.volumes == 0) {
    by_minicluster_.erase(it);
  }
}

KeyCache::Stats KeyCache::GetStats() const {
  std::lock_guard lock(mu_);
  return {hits_, misses_, by_minicluster_.size(), by_volume_.size()};
}

}  // namespace fcc::driver
