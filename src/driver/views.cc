#include "driver/views.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/file.h"
#include "common/names.h"
#include "common/volume_contract.h"

namespace fcc::driver {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kDigestPrefix = "sha256:";
constexpr size_t kDigestHexDigits = 64;
constexpr size_t kStoredDigestDigits = 16;
constexpr size_t kMaxManifestBytes = size_t{64} * 1024;
constexpr std::string_view kTmpPrefix = ".tmp-";

bool IsLowerHex(std::string_view s) {
  return std::ranges::all_of(s, [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

// Copies `from` to `to` (which must not exist) through a temporary sibling,
// so `to` is either the whole tree or absent.
std::expected<void, std::string> CopyTreeAtomically(const fs::path& from,
                                                    const fs::path& to) {
  const fs::path tmp =
      to.parent_path() / (std::string(kTmpPrefix) + to.filename().string());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::copy(from, tmp,
           fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
  if (!ec) fs::permissions(tmp, fs::status(from).permissions(), ec);
  if (!ec) fs::rename(tmp, to, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    return std::unexpected(fmt::format("copying {} to {}: {}", from.string(),
                                       to.string(), ec.message()));
  }
  return {};
}

// One view of the image, copied into the store if it is not there yet.
std::expected<View, std::string> InstallView(const fs::path& source,
                                             const fs::path& store) {
  const std::string name = source.filename().string();
  const fs::path manifest = source / std::string(common::kViewManifest);
  auto text = common::ReadTextFile(manifest.string(), kMaxManifestBytes);
  if (!text) {
    return std::unexpected(fmt::format("view {}: reading {}: {}", name,
                                       manifest.string(), text.error()));
  }
  auto digest = CheckViewManifest(name, *text);
  if (!digest) {
    return std::unexpected(fmt::format("view {}: {}", name, digest.error()));
  }
  const fs::path stored = store / StoredViewName(name, *digest);
  std::error_code ec;
  if (!fs::is_directory(stored, ec)) {
    const auto started = std::chrono::steady_clock::now();
    if (auto copied = CopyTreeAtomically(source, stored); !copied) {
      return std::unexpected(fmt::format("view {}: {}", name, copied.error()));
    }
    spdlog::info("view {} ({}) copied to {} in {} ms", name, *digest,
                 stored.string(),
                 std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - started)
                     .count());
  }
  auto root = IdentifyPath(stored.string());
  if (!root) {
    return std::unexpected(fmt::format(
        "view {}: stat {}: {}", name, stored.string(), root.error().message()));
  }
  return View{name, std::move(*digest), stored.string(), *root};
}

// Every view copy in the store, by identity (temporary copies left by a
// killed driver are removed: nothing can have mounted them).
std::vector<StoredView> StoredViews(const fs::path& store) {
  std::vector<StoredView> stored;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(store, ec)) {
    const std::string file = entry.path().filename().string();
    if (file.starts_with(kTmpPrefix)) {
      std::error_code ignored;
      fs::remove_all(entry.path(), ignored);
      continue;
    }
    const size_t at = file.find('@');
    if (at == std::string::npos) continue;
    if (auto id = IdentifyPath(entry.path().string())) {
      stored.push_back({file.substr(0, at), *id});
    }
  }
  return stored;
}

}  // namespace

std::expected<FileId, std::error_code> IdentifyPath(const std::string& path) {
  struct stat st{};
  if (lstat(path.c_str(), &st) != 0) {
    return std::unexpected(std::error_code(errno, std::generic_category()));
  }
  return FileId{st.st_dev, st.st_ino};
}

const View* ViewCatalog::Find(std::string_view name) const {
  auto it = std::ranges::find(served_, name, &View::name);
  return it == served_.end() ? nullptr : &*it;
}

std::string ViewCatalog::ServedNames() const {
  if (served_.empty()) return "none";
  std::vector<std::string_view> names;
  names.reserve(served_.size());
  for (const View& view : served_) names.push_back(view.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

bool ViewCatalog::IsViewRoot(const FileId& id) const {
  return std::ranges::find(stored_, id, &StoredView::root) != stored_.end() ||
         std::ranges::find(served_, id, &View::root) != served_.end();
}

bool ViewCatalog::IsCopyOf(std::string_view name, const FileId& id) const {
  const View* view = Find(name);
  if (view != nullptr && view->root == id) return true;
  return std::ranges::any_of(stored_, [&](const StoredView& copy) {
    return copy.name == name && copy.root == id;
  });
}

std::expected<std::string, std::string> CheckViewManifest(
    std::string_view dir_name, std::string_view manifest_text) {
  const auto manifest = nlohmann::json::parse(manifest_text, nullptr, false);
  if (!manifest.is_object()) return std::unexpected("the manifest is not JSON");
  const std::string name = manifest.value("name", "");
  if (name != dir_name || name.size() > 63 ||
      !common::IsDns1123Subdomain(name)) {
    return std::unexpected(fmt::format(
        "the manifest's name must be the view's directory name, a DNS-1123 "
        "subdomain of at most 63 characters; got {:?}",
        name));
  }
  std::string digest = manifest.value("digest", "");
  const std::string_view hex = std::string_view(digest).substr(
      std::min(digest.size(), kDigestPrefix.size()));
  if (!digest.starts_with(kDigestPrefix) || hex.size() != kDigestHexDigits ||
      !IsLowerHex(hex)) {
    return std::unexpected("the manifest's digest must be sha256:<64 hex>");
  }
  return digest;
}

std::string StoredViewName(const std::string& name, const std::string& digest) {
  return name + "@" + digest.substr(kDigestPrefix.size(), kStoredDigestDigits);
}

std::expected<ViewCatalog, std::string> InstallViews(
    const std::string& source_dir, const std::string& store_dir) {
  std::error_code ec;
  std::vector<View> served;
  if (!source_dir.empty() && fs::is_directory(source_dir, ec)) {
    fs::create_directories(store_dir, ec);
    if (ec) {
      return std::unexpected(fmt::format(
          "cannot create --view-store-dir {}: {}", store_dir, ec.message()));
    }
    std::vector<fs::path> sources;
    for (const auto& entry : fs::directory_iterator(source_dir, ec)) {
      if (entry.is_directory()) sources.push_back(entry.path());
    }
    std::ranges::sort(sources);
    for (const fs::path& source : sources) {
      auto view = InstallView(source, store_dir);
      if (!view) return std::unexpected(view.error());
      served.push_back(std::move(*view));
    }
  }
  std::vector<StoredView> stored;
  if (fs::is_directory(store_dir, ec)) stored = StoredViews(store_dir);
  return ViewCatalog(std::move(served), std::move(stored));
}

}  // namespace fcc::driver
