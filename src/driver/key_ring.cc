#include "driver/key_ring.h"

#include <dirent.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "common/names.h"
#include "common/volume_contract.h"
#include "curve/hkdf.h"
#include "driver/master_key.h"

namespace fcc::driver {
namespace {

// kubelet's atomic writer: a Secret volume's files are symlinks through
// ..data to a timestamped directory, swapped by one rename.
constexpr char kDataLink[] = "/..data";
// A reload that raced a swap is read again, at most this often.
constexpr int kReloadAttempts = 3;
// HKDF salt of the fingerprints that tell a key id's bytes apart.
constexpr char kFingerprintSalt[] =
    "curve.minicluster.dev/key-ring-fingerprint";

std::string StatSignature(const std::string& path) {
  struct stat st{};
  if (stat(path.c_str(), &st) != 0) return fmt::format("error {}", errno);
  return fmt::format("{}:{}:{}.{}:{}.{}:{}", st.st_dev, st.st_ino,
                     st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_ctim.tv_sec,
                     st.st_ctim.tv_nsec, st.st_size);
}

// The target of <dir>/..data, or "" when `dir` is not kubelet's.
std::string DataTarget(const std::string& dir) {
  std::array<char, 256> target{};
  const ssize_t n =
      readlink((dir + kDataLink).c_str(), target.data(), target.size() - 1);
  if (n <= 0) return "";
  return std::string(target.data(), static_cast<size_t>(n));
}

// The entries of `dir` that are not hidden (kubelet's ..data and
// ..<timestamp> are), or an error naming `dir`.
std::expected<std::vector<std::string>, std::string> ListDir(
    const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    return std::unexpected(
        fmt::format("master key directory {}: {}", dir, std::strerror(errno)));
  }
  std::vector<std::string> names;
  while (const dirent* entry = readdir(d)) {
    if (entry->d_name[0] != '.') names.emplace_back(entry->d_name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

std::expected<void, std::string> CheckKeyId(std::string_view id,
                                            std::string_view field) {
  if (common::IsDns1123Label(id)) return {};
  return std::unexpected(fmt::format(
      "{} must be a master key id: a DNS-1123 label (at most 63 characters "
      "of a-z 0-9 '-', starting and ending with a letter or digit), the name "
      "of <id>.key in the flux-curve-csi-master-key Secret",
      field));
}

std::shared_ptr<KeyRing> KeyRing::Fixed(curve::Secret key, std::string id) {
  std::shared_ptr<KeyRing> ring(
      new KeyRing({.dir = "", .file = "", .default_id = id}));
  std::lock_guard lock(ring->mu_);
  ring->InstallLocked(
      {{id, std::make_shared<const curve::Secret>(std::move(key))}}, "fixed");
  return ring;
}

std::expected<std::shared_ptr<KeyRing>, std::string> KeyRing::Open(
    KeyRingSource source) {
  if (auto ok = CheckKeyId(source.default_id, "--default-key-id"); !ok) {
    return std::unexpected(ok.error());
  }
  if (source.dir.empty() == source.file.empty()) {
    return std::unexpected(
        "exactly one of --master-key-dir and --master-key-file must be set");
  }
  if (!source.file.empty()) {
    // Checked here, not in the ring: a bad single key is a refusal to serve.
    if (auto key = LoadMasterKey(source.file); !key) {
      return std::unexpected(key.error());
    }
  } else if (auto listed = ListDir(source.dir); !listed) {
    return std::unexpected(listed.error() + "; " + kCreateMasterKeyHint);
  }
  std::shared_ptr<KeyRing> ring(new KeyRing(std::move(source)));
  ring->Refresh();
  std::lock_guard lock(ring->mu_);
  const std::string& id = ring->source_.default_id;
  if (ring->keys_.empty()) {
    return std::unexpected(
        fmt::format("no usable master key in {1}: the default master key {0:?} "
                    "({1}/{0}.key) is missing or was refused (a refusal is "
                    "logged above, with why); {2}",
                    id, ring->source_.dir, kCreateMasterKeyHint));
  }
  if (!ring->keys_.contains(id)) {
    // Serving on: the node's mounted volumes, of every key, must still be
    // unpublished. Publishes of the default key fail until it is back.
    spdlog::error(
        "the default master key {0:?} ({1}/{0}.key) is missing or was "
        "refused: volumes without volumeAttributes.{2} cannot be published on "
        "this node until it is back in the flux-curve-csi-master-key Secret "
        "or --default-key-id names a key the Secret has",
        id, ring->source_.dir, common::kAttrKeyId);
  }
  return ring;
}

std::string KeyRing::Signature() const {
  // One file is read once, at start, as before key rings.
  if (!source_.file.empty()) return "file";
  std::string data = DataTarget(source_.dir);
  if (!data.empty()) return "data:" + data;
  // A plain directory (hostPath, tests): its entries and their files.
  std::string signature = StatSignature(source_.dir);
  if (auto names = ListDir(source_.dir)) {
    for (const auto& name : *names) {
      signature += "|" + name + "=" + StatSignature(source_.dir + "/" + name);
    }
  }
  return signature;
}

std::expected<KeyRing::Loaded, std::string> KeyRing::LoadKeys(
    const std::string& signature) const {
  Loaded keys;
  std::string failed;
  auto add = [&](const std::string& id, const std::string& path) {
    auto key = ReadMasterKey(path);
    if (key) {
      keys.emplace(id, std::make_shared<const curve::Secret>(std::move(*key)));
    } else if (key.error().transient) {
      failed = key.error().message;
    } else {
      spdlog::error("master key {:?} refused, the other keys stay in use: {}",
                    id, key.error().message);
    }
  };
  if (!source_.file.empty()) {
    add(source_.default_id, source_.file);
    if (!failed.empty()) return std::unexpected(failed);
    return keys;
  }
  // Read one snapshot: kubelet's timestamped directory, not through ..data
  // (kubelet's link is relative; an absolute one is taken as it is).
  std::string base = source_.dir;
  if (signature.starts_with("data:")) {
    const std::string target = signature.substr(5);
    base =
        target.starts_with('/') ? target : fmt::format("{}/{}", base, target);
  }
  auto names = ListDir(base);
  if (!names) return std::unexpected(names.error());
  for (const auto& name : *names) {
    const std::string_view id =
        std::string_view(name).substr(0, name.size() - kKeyFileSuffix.size());
    if (!name.ends_with(kKeyFileSuffix) || !CheckKeyId(id, "")) {
      spdlog::warn(
          "master key directory {}: ignoring {:?}, which is not "
          "<key-id>.key",
          source_.dir, name);
      continue;
    }
    add(std::string(id), fmt::format("{}/{}", base, name));
    if (!failed.empty()) return std::unexpected(failed);
  }
  return keys;
}

void KeyRing::ReloadLocked(const std::string& signature) {
  std::string read_from = signature;
  std::optional<std::pair<Loaded, std::string>> complete;
  std::string error;
  for (int attempt = 0; attempt < kReloadAttempts; ++attempt) {
    auto keys = LoadKeys(read_from);
    if (after_read_) after_read_();
    std::string now = Signature();
    if (keys) {
      complete.emplace(std::move(*keys), read_from);
    } else {
      error = std::move(keys.error());
    }
    if (keys && now == read_from) break;
    read_from = std::move(now);
  }
  if (!complete) {
    // Keep what was loaded; signature_ unchanged makes the next call retry.
    if (error != reload_error_) {
      spdlog::error(
          "master keys not reloaded, the {} loaded before stay in use and "
          "the next publish or /metrics request reads again: {}",
          keys_.size(), error);
    }
    reload_error_ = std::move(error);
    return;
  }
  if (!reload_error_.empty()) spdlog::info("master keys readable again");
  reload_error_.clear();
  // Under the signature the keys were read from: if the source changed
  // since, the next call reads it again.
  InstallLocked(complete->first, std::move(complete->second));
}

void KeyRing::InstallLocked(const Loaded& loaded, std::string signature) {
  Keys keys;
  for (const auto& [id, secret] : loaded) {
    keys.emplace(id, RingKey{id, secret, VersionLocked(id, *secret)});
  }
  keys_ = std::move(keys);
  signature_ = std::move(signature);
  std::vector<std::string> ids;
  for (const auto& [id, key] : keys_) ids.push_back(id);
  spdlog::info("master keys loaded: {} (default {})", fmt::join(ids, ", "),
               source_.default_id);
}

uint64_t KeyRing::VersionLocked(const std::string& id,
                                const curve::Secret& secret) {
  // A one-way function of the key, to tell bytes apart after the key itself
  // is gone from memory (a removed id); kept in memory only.
  curve::Secret fingerprint =
      curve::HkdfSha256(kFingerprintSalt, secret.reveal(), id, 32);
  auto [it, first] = seen_.try_emplace(id);
  if (!first) {
    if (it->second.fingerprint == fingerprint) return it->second.version;
    spdlog::warn(
        "master key {:?} changed its bytes: MiniClusters pinned to it get "
        "other certs on nodes that derive from now on, and on this node for "
        "volumes published from now on; never reuse a key id for a new key",
        id);
  }
  it->second = Seen{std::move(fingerprint), ++versions_};
  return it->second.version;
}

void KeyRing::Refresh() {
  if (source_.dir.empty() && source_.file.empty()) return;  // Fixed
  const std::string signature = Signature();
  std::lock_guard lock(mu_);
  if (signature != signature_) ReloadLocked(signature);
}

std::string KeyRing::ReloadError() const {
  std::lock_guard lock(mu_);
  return reload_error_;
}

void KeyRing::SetAfterReadForTesting(std::function<void()> hook) {
  std::lock_guard lock(mu_);
  after_read_ = std::move(hook);
}

std::expected<RingKey, std::string> KeyRing::Find(std::string_view id) {
  Refresh();
  const std::string_view wanted = id.empty() ? source_.default_id : id;
  std::lock_guard lock(mu_);
  if (auto it = keys_.find(wanted); it != keys_.end()) return it->second;
  std::vector<std::string_view> ids;
  for (const auto& [have, secret] : keys_) ids.push_back(have);
  if (id.empty()) {
    return std::unexpected(fmt::format(
        "the default master key {:?} (for volumes without "
        "volumeAttributes.{}) is not on this node, which has [{}]: put it "
        "back in the flux-curve-csi-master-key Secret, or set the driver's "
        "--default-key-id to the key these MiniClusters were made with",
        wanted, common::kAttrKeyId, fmt::join(ids, ", ")));
  }
  return std::unexpected(fmt::format(
      "master key {:?} (volumeAttributes.{}) is not on this node, which has "
      "[{}]: if it was just added to the flux-curve-csi-master-key Secret, "
      "kubelet retries this mount once the driver's Secret volume has it "
      "(about a minute); otherwise add {}{} to that Secret, or re-create the "
      "MiniCluster after setting the controller's --key-id to a key every "
      "node has",
      wanted, common::kAttrKeyId, fmt::join(ids, ", "), wanted,
      kKeyFileSuffix));
}

std::vector<std::string> KeyRing::Ids() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> ids;
  for (const auto& [id, secret] : keys_) ids.push_back(id);
  return ids;
}

}  // namespace fcc::driver
