// The master keys a node derives from, each named by an id, reloaded when
// kubelet updates the Secret volume they come from (docs/admin/key-rotation.md,
// "Master key rotation").
#pragma once

#include <cstdint>
#include <expected>
#include <functional>
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
  // Which bytes `id` names: the same while they stay the same, another
  // number once they change, across a removal and re-adding of the id too.
  // The key cache keys certs by it, so a reused id never serves old certs.
  uint64_t version = 0;
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
  // left out with a log line naming it. With no key at all the error says
  // why (the driver then refuses to serve); without the default key alone
  // the ring opens with an error log line, so that a node whose default key
  // was removed still unpublishes (and re-publishes) its mounted volumes.
  static std::expected<std::shared_ptr<KeyRing>, std::string> Open(
      KeyRingSource source);

  // The key `id` names ("" names the default key), after reloading the ring
  // if its source changed. The error names the id, what the node has, and
  // the fix; never key material.
  std::expected<RingKey, std::string> Find(std::string_view id);
  // Reloads if the source changed (a cheap stat when it did not). A reload
  // that cannot read the source keeps the keys it had and is tried again at
  // the next call.
  void Refresh();
  // Why the last reload failed, or "" when it did not.
  std::string ReloadError() const;
  // Tests: `hook` runs after each read of the source, to change it
  // mid-reload.
  void SetAfterReadForTesting(std::function<void()> hook);
  // The ids loaded now, sorted.
  std::vector<std::string> Ids() const;
  const std::string& default_id() const { return source_.default_id; }

 private:
  // As read from the source.
  using Loaded =
      std::map<std::string, std::shared_ptr<const curve::Secret>, std::less<>>;
  using Keys = std::map<std::string, RingKey, std::less<>>;
  // Every id loaded since start, removed ones included: a fingerprint of
  // its bytes (never logged) and their version.
  struct Seen {
    curve::Secret fingerprint;
    uint64_t version = 0;
  };
  explicit KeyRing(KeyRingSource source) : source_(std::move(source)) {}
  // What identifies the source's current contents: kubelet's ..data target
  // for a Secret volume, else the directory's and its files' inodes and
  // times.
  std::string Signature() const;
  // Reads the whole source, retrying when it changes underneath (kubelet
  // removes the old snapshot right after the swap). Installs the last
  // complete read under the signature it was read from; with none, keeps
  // the keys and signature it had, so the next Refresh reads again.
  void ReloadLocked(const std::string& signature);
  // The keys of the snapshot `signature` names, or why the source could not
  // be read (a key refused for what it is, not for a failed read, is left
  // out instead).
  std::expected<Loaded, std::string> LoadKeys(
      const std::string& signature) const;
  void InstallLocked(const Loaded& loaded, std::string signature);
  uint64_t VersionLocked(const std::string& id, const curve::Secret& secret);

  const KeyRingSource source_;
  mutable std::mutex mu_;
  Keys keys_;
  std::string signature_;  // of what keys_ was loaded from
  std::string reload_error_;
  std::function<void()> after_read_;
  std::map<std::string, Seen, std::less<>> seen_;
  uint64_t versions_ = 0;
};

}  // namespace fcc::driver
