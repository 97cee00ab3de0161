#include "driver/view/catalog.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "common/file.h"
#include "common/names.h"
#include "common/volume_contract.h"
#include "driver/view/store.h"

namespace fcc::driver {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kDigestPrefix = "sha256:";
constexpr size_t kDigestHexDigits = 64;
constexpr size_t kStoredDigestDigits = 16;
constexpr size_t kMaxManifestBytes = size_t{64} * 1024;

bool IsLowerHex(std::string_view s) {
  return std::ranges::all_of(s, [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

// One view of the image, installed in the store. The error names the cause
// (the view's name is the failure's).
std::expected<View, std::string> InstallView(const fs::path& source,
                                             ViewStore& store) {
  const fs::path manifest = source / std::string(common::kViewManifest);
  auto text = common::ReadTextFile(manifest.string(), kMaxManifestBytes);
  if (!text) {
    return std::unexpected(
        fmt::format("reading {}: {}", manifest.string(), text.error()));
  }
  const std::string name = source.filename().string();
  auto digest = CheckViewManifest(name, *text);
  if (!digest) return std::unexpected(digest.error());
  auto stored = store.Install(source, StoredViewName(name, *digest), *digest);
  if (!stored) return std::unexpected(stored.error());
  auto root = IdentifyPath(*stored);
  if (!root) {
    return std::unexpected(
        fmt::format("stat {}: {}", *stored, root.error().message()));
  }
  return View{name, std::move(*digest), std::move(*stored), *root};
}

// The image's views: <source_dir>/<name>/, sorted.
std::vector<fs::path> SourceViews(const std::string& source_dir) {
  std::vector<fs::path> sources;
  std::error_code ec;
  if (source_dir.empty()) return sources;
  for (const auto& entry : fs::directory_iterator(source_dir, ec)) {
    if (entry.is_directory()) sources.push_back(entry.path());
  }
  std::ranges::sort(sources);
  return sources;
}

// Every directory in the store (copies, and temporaries a pod may still
// mount), by identity, so that unpublish recognises their binds; a copy's
// view name (before the '@'), so that re-publish accepts any of its copies.
std::vector<StoredView> StoredViews(const fs::path& store) {
  std::vector<StoredView> stored;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(store, ec)) {
    if (!entry.is_directory(ec) || entry.is_symlink(ec)) continue;
    const std::string file = entry.path().filename().string();
    const size_t at = file.find('@');
    if (auto id = IdentifyPath(entry.path().string())) {
      stored.push_back(
          {at == std::string::npos ? std::string() : file.substr(0, at),
           entry.path().string(), *id});
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

const ViewFailure* ViewCatalog::FindFailure(std::string_view name) const {
  auto it = std::ranges::find(failures_, name, &ViewFailure::name);
  return it == failures_.end() ? nullptr : &*it;
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

std::optional<View> ViewCatalog::CopyOf(std::string_view name,
                                        const FileId& id) const {
  const View* view = Find(name);
  if (view != nullptr && view->root == id) return *view;
  for (const StoredView& copy : stored_) {
    if (copy.name == name && copy.root == id) {
      return View{copy.name, "", copy.path, copy.root};
    }
  }
  return std::nullopt;
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

ViewCatalog InstallViews(const std::string& source_dir,
                         const std::string& store_dir,
                         std::chrono::milliseconds lock_wait) {
  const std::vector<fs::path> sources = SourceViews(source_dir);
  std::error_code ec;
  if (sources.empty() && !fs::is_directory(store_dir, ec)) return {};
  std::vector<View> served;
  std::vector<ViewFailure> failures;
  std::vector<common::UniqueFd> holds;
  auto store = ViewStore::Lock(store_dir, lock_wait);
  for (const fs::path& source : sources) {
    const std::string name = source.filename().string();
    auto view =
        store ? InstallView(source, *store) : std::unexpected(store.error());
    auto hold =
        view ? ViewStore::Hold(view->path) : std::unexpected(view.error());
    if (!hold) {
      failures.push_back({name, hold.error()});
      continue;
    }
    holds.push_back(std::move(*hold));
    served.push_back(std::move(*view));
  }
  if (store) {
    std::set<std::string> keep;
    for (const View& view : served) {
      keep.insert(fs::path(view.path).filename().string());
    }
    store->Collect(keep);
  }
  return ViewCatalog(std::move(served), StoredViews(store_dir),
                     std::move(failures), std::move(holds));
}

}  // namespace fcc::driver
