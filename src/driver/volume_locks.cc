#include "driver/volume_locks.h"

#include <functional>

namespace fcc::driver {

VolumeLocks::Guard VolumeLocks::Lock(const std::string& volume_id) {
  Shard& shard = shards_[std::hash<std::string>{}(volume_id) % kShards];
  std::shared_ptr<Entry> entry;
  {
    std::lock_guard lock(shard.mu);
    auto& slot = shard.entries[volume_id];
    if (!slot) slot = std::make_shared<Entry>();
    ++slot->users;
    entry = slot;
  }
  return Guard(shard, volume_id, std::move(entry));
}

VolumeLocks::Guard::Guard(Shard& shard, std::string key,
                          std::shared_ptr<Entry> entry)
    : shard_(shard), key_(std::move(key)), entry_(std::move(entry)) {
  entry_->mu.lock();
}

VolumeLocks::Guard::~Guard() {
  entry_->mu.unlock();
  std::lock_guard lock(shard_.mu);
  if (--entry_->users == 0) shard_.entries.erase(key_);
}

}  // namespace fcc::driver
