// The master keys a node derives from, each named by an id, reloaded when
// kubelet updates the Secret volume they come from (docs/operations.md,
// "Master key rotation").
#pragma once

#include <expected>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "curve/secret.h"

namespace fcc::driver {

// The id of the key in the Secret's master.key: the default key of every
// install made before key rotation.
inline constexpr char kDefaultKeyId[] = "master";
// A key file in the ring's directory is <id>.key.
inline constexpr std::string_view kKeyFileSuffix = ".key";

// A key id is a DNS-1123 label, so that <id>.key is a Secret key, a file
// name and a label value alike. The error names `field`.
std::expected<void, std::string> CheckKeyId(std::string_view id,
                                            std::string_view field);

struct RingKey {
  std::string id;
  std::shared_ptr<const curve::Secret> secret;
};

// Where the ring's keys come from.
struct KeyRingSource {
  // A directory of <id>.key files (the Secret volume), or
  std::string dir;
  // one file holding the default key (--master-key-file), read once.
  std::string file;
  std::string default_id = kDefaultKeyId;
};

class KeyRing final {
 public:
  // A ring of one key that never changes (tests, benchmarks).
  static std::shared_ptr<KeyRing> Fixed(curve::Secret key,
                                        std::string id = kDefaultKeyId);
  // Loads every key of `source`. A key that fails LoadMasterKey's checks is
  // left out with a log line naming it; the default key must load, or the
  // error says why (the driver then refuses to serve).
  static std::expected<std::shared_ptr<KeyRing>, std::string> Open(
      KeyRingSource source);

  // The key `id` names ("" names the default key), after reloading the ring
  // if its source changed. The error names the id, what the node has, and
  // the fix; never key material.
  std::expected<RingKey, std::string> Find(std::string_view id);
  // Reloads if the source changed (a cheap stat when it did not).
  void Refresh();
  // The ids loaded now, sorted.
  std::vector<std::string> Ids() const;
  const std::string& default_id() const { return source_.default_id; }

 private:
  using Keys =
      std::map<std::string, std::shared_ptr<const curve::Secret>, std::less<>>;
  explicit KeyRing(KeyRingSource source) : source_(std::move(source)) {}
  // What identifies the source's current contents: kubelet's ..data target
  // for a Secret volume, else the directory's and its files' inodes and
  // times.
  std::string Signature() const;
  // Reads the whole source, retrying when it changes underneath (kubelet
  // removes the old snapshot right after the swap).
  void ReloadLocked(const std::string& signature);
  Keys LoadKeys(const std::string& signature) const;

  const KeyRingSource source_;
  mutable std::mutex mu_;
  Keys keys_;
  std::string signature_;  // of what keys_ was loaded from
};

}  // namespace fcc::driver
