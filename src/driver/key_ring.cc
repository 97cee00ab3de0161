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

#include "common/names.h"
#include "common/volume_contract.h"
#include "driver/master_key.h"

namespace fcc::driver {
namespace {

// kubelet's atomic writer: a Secret volume's files are symlinks through
// ..data to a timestamped directory, swapped by one rename.
constexpr char kDataLink[] = "/..data";
// A reload that raced a swap is read again, at most this often.
constexpr int kReloadAttempts = 3;

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
  ring->keys_.emplace(std::move(id),
                      std::make_shared<const curve::Secret>(std::move(key)));
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
  if (!ring->keys_.contains(ring->source_.default_id)) {
    return std::unexpected(fmt::format(
        "the default master key {0:?} ({1}/{0}.key) is missing or was "
        "refused (a refusal is logged above, with why); {2}",
        ring->source_.default_id, ring->source_.dir, kCreateMasterKeyHint));
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

KeyRing::Keys KeyRing::LoadKeys(const std::string& signature) const {
  Keys keys;
  auto add = [&](const std::string& id, const std::string& path) {
    auto key = LoadMasterKey(path);
    if (!key) {
      spdlog::error("master key {:?} refused, the other keys stay in use: {}",
                    id, key.error());
      return;
    }
    keys.emplace(id, std::make_shared<const curve::Secret>(std::move(*key)));
  };
  if (!source_.file.empty()) {
    add(source_.default_id, source_.file);
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
  if (!names) {
    spdlog::error("{}", names.error());
    return keys;
  }
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
  }
  return keys;
}

void KeyRing::ReloadLocked(const std::string& signature) {
  std::string loaded_from = signature;
  Keys keys;
  for (int attempt = 0; attempt < kReloadAttempts; ++attempt) {
    keys = LoadKeys(loaded_from);
    const std::string now = Signature();
    if (now == loaded_from) break;
    loaded_from = now;
  }
  for (const auto& [id, secret] : keys) {
    auto old = keys_.find(id);
    if (old != keys_.end() && !(*old->second == *secret)) {
      spdlog::warn(
          "master key {:?} changed its bytes: MiniClusters pinned to it get "
          "other certs on nodes that derive from now on; never reuse a key "
          "id for a new key",
          id);
    }
  }
  keys_ = std::move(keys);
  signature_ = std::move(loaded_from);
  std::vector<std::string> ids;
  for (const auto& [id, secret] : keys_) ids.push_back(id);
  spdlog::info("master keys loaded: {} (default {})", fmt::join(ids, ", "),
               source_.default_id);
}

void KeyRing::Refresh() {
  if (source_.dir.empty() && source_.file.empty()) return;  // Fixed
  const std::string signature = Signature();
  std::lock_guard lock(mu_);
  if (signature != signature_) ReloadLocked(signature);
}

std::expected<RingKey, std::string> KeyRing::Find(std::string_view id) {
  Refresh();
  const std::string_view wanted = id.empty() ? source_.default_id : id;
  std::lock_guard lock(mu_);
  if (auto it = keys_.find(wanted); it != keys_.end()) {
    return RingKey{it->first, it->second};
  }
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
