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
  std::promise<CertPtr> derived;
  std::shared_future<CertPtr> cert;
  bool inserted = false;
  bool derive = false;
  {
    std::lock_guard lock(mu_);
    auto [it, created] = by_minicluster_.try_emplace(key);
    if (created) {
      // Single flight: concurrent first publishes of one MiniCluster (a
      // Job's pods landing together) wait for one derivation, not one each.
      it->second.cert = derived.get_future().share();
      it->second.deriver = &derived;
      derive = true;
      ++misses_;
    } else {
      ++hits_;
    }
    inserted = by_volume_.emplace(volume_id, key).second;
    if (inserted) ++it->second.volumes;
    cert = it->second.cert;
  }
  if (derive) {
    // Derive outside the lock: other MiniClusters' publishes go on meanwhile.
    try {
      auto made = std::make_shared<const MiniClusterCert>(
          MakeMiniClusterCert(master_key_, id));
      // Once per MiniCluster per node: operators (and driver_bench) count
      // these to see the cache work. The public key is not secret.
      spdlog::info("derived the key of MiniCluster {} (public-key {})",
                   id.QualifiedName(), made->public_z85);
      derived.set_value(std::move(made));
    } catch (...) {
      // Waiters see the same failure; the next publish derives afresh.
      derived.set_exception(std::current_exception());
      std::lock_guard lock(mu_);
      if (auto it = by_minicluster_.find(key);
          it != by_minicluster_.end() && it->second.deriver == &derived) {
        for (auto vol = by_volume_.begin(); vol != by_volume_.end();) {
          vol = vol->second == key ? by_volume_.erase(vol) : std::next(vol);
        }
        by_minicluster_.erase(it);
      }
    }
  }
  return {cert.get(), inserted};  // rethrows a failed derivation
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
