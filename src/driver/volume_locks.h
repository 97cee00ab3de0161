// Per-volume serialisation without a global lock on the hot path: a volume's
// operations queue behind each other, different volumes never wait on one
// another beyond a short shard-map lookup.
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace fcc::driver {

class VolumeLocks {
 private:
  struct Entry {
    std::mutex mu;
    size_t users = 0;  // guarded by the shard's mutex
  };
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::shared_ptr<Entry>> entries;
  };

 public:
  class Guard {
   public:
    Guard(Guard&&) = delete;
    ~Guard();

   private:
    friend class VolumeLocks;
    Guard(Shard& shard, std::string key, std::shared_ptr<Entry> entry);
    Shard& shard_;
    std::string key_;
    std::shared_ptr<Entry> entry_;
  };

  // Blocks until no other holder of `volume_id` is left.
  [[nodiscard]] Guard Lock(const std::string& volume_id);

 private:
  static constexpr size_t kShards = 64;
  std::array<Shard, kShards> shards_;
};

}  // namespace fcc::driver
