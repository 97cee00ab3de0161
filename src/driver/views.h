// Flux views: self-contained Flux installs that the driver's image carries
// and serves as read-only view volumes, so that a MiniCluster's application
// image needs no Flux of its own. Each is copied once per node into a host
// directory (the store), and pods bind that copy: the binds outlive the
// driver's container (a restart, an upgrade, the old image's removal).
#pragma once

#include <sys/types.h>

#include <expected>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace fcc::driver {

// A file's identity: how a mount of a view is told from any other mount.
struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  friend bool operator==(const FileId&, const FileId&) = default;
};

std::expected<FileId, std::error_code> IdentifyPath(const std::string& path);

struct View {
  std::string name;    // volumeAttributes.view, e.g. flux-core-0.88.0
  std::string digest;  // "sha256:<hex>" of its files, from its manifest
  std::string path;    // the node's copy in the store: what pods bind
  FileId root;         // of `path`
};

// A copy in the store: <name>@<digest prefix> (StoredViewName).
struct StoredView {
  std::string name;  // the view's, without the digest
  FileId root;
};

// The views this driver serves, and every copy in the store (older
// releases' too), whose mounts unpublish must still recognise.
class ViewCatalog {
 public:
  ViewCatalog() = default;
  ViewCatalog(std::vector<View> served, std::vector<StoredView> stored)
      : served_(std::move(served)), stored_(std::move(stored)) {}

  const View* Find(std::string_view name) const;
  // "flux-core-0.88.0, ..." or "none", for error messages.
  std::string ServedNames() const;
  bool IsViewRoot(const FileId& id) const;
  // Whether `id` is the root of a copy of view `name`: the one served or an
  // older one a running pod still has (after an upgrade changed the view).
  bool IsCopyOf(std::string_view name, const FileId& id) const;
  const std::vector<View>& served() const { return served_; }
  const std::vector<StoredView>& stored() const { return stored_; }

 private:
  std::vector<View> served_;
  std::vector<StoredView> stored_;
};

// Checks a view's manifest (share/flux-view/view.json, parsed) against the
// directory name it was found under: {name: <dir name>, digest:
// sha256:<64 hex>}. Returns the digest.
std::expected<std::string, std::string> CheckViewManifest(
    std::string_view dir_name, std::string_view manifest_text);

// The store directory a view's copy lives in: <name>@<first 16 hex digits>,
// so a changed view is a new directory and a pod's bind never changes under
// it.
std::string StoredViewName(const std::string& name, const std::string& digest);

// Reads every <source_dir>/<name>/ (a view and its manifest), copies those
// missing from `store_dir` there (complete or not at all: copied under a
// temporary name, then renamed), and returns what is served. A missing or
// empty source_dir serves no views. An error names the view and the cause.
std::expected<ViewCatalog, std::string> InstallViews(
    const std::string& source_dir, const std::string& store_dir);

}  // namespace fcc::driver
