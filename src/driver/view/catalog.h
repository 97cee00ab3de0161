// Flux views: self-contained Flux installs that the driver's image carries
// and serves as read-only view volumes, so that a MiniCluster's application
// image needs no Flux of its own. Each is copied once per node into a host
// directory (the store), and pods bind that copy: the binds outlive the
// driver's container (a restart, an upgrade, the old image's removal).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "common/unique_fd.h"

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
  std::string path;
  FileId root;
};

// A view of the image that could not be installed, and why: its publishes
// fail naming the cause, while certs are served as ever.
struct ViewFailure {
  std::string name;
  std::string cause;
};

// The views this driver serves, those it could not install, and every copy
// in the store (older releases' too), whose mounts unpublish must still
// recognise. Holds a shared lock on each served copy (view/store.h) for as
// long as it lives, so no other driver removes one.
class ViewCatalog {
 public:
  ViewCatalog() = default;
  ViewCatalog(std::vector<View> served, std::vector<StoredView> stored,
              std::vector<ViewFailure> failures = {},
              std::vector<common::UniqueFd> holds = {})
      : served_(std::move(served)),
        stored_(std::move(stored)),
        failures_(std::move(failures)),
        holds_(std::move(holds)) {}

  const View* Find(std::string_view name) const;
  // Why `name` could not be installed, if it could not.
  const ViewFailure* FindFailure(std::string_view name) const;
  // "flux-core-0.88.0, ..." or "none", for error messages.
  std::string ServedNames() const;
  bool IsViewRoot(const FileId& id) const;
  // The copy of view `name` whose root is `id`: the one served or an older
  // one a running pod still has (after an upgrade changed the view; its
  // digest then unknown, "").
  std::optional<View> CopyOf(std::string_view name, const FileId& id) const;
  const std::vector<View>& served() const { return served_; }
  const std::vector<StoredView>& stored() const { return stored_; }
  const std::vector<ViewFailure>& failures() const { return failures_; }

 private:
  std::vector<View> served_;
  std::vector<StoredView> stored_;
  std::vector<ViewFailure> failures_;
  std::vector<common::UniqueFd> holds_;
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

// Reads every <source_dir>/<name>/ (a view and its manifest), installs each
// in the store at `store_dir` (view/store.h: locked, verified against the
// manifest's digest, complete or not at all), removes the store's copies
// that nothing serves or mounts, and returns what is served. A missing or
// empty source_dir serves no views. A view that cannot be installed (the
// store's lock not had within `lock_wait` among the causes) is a failure in
// the catalog naming the cause, never an error of the driver.
inline constexpr std::chrono::seconds kDefaultViewStoreLockWait{30};
ViewCatalog InstallViews(
    const std::string& source_dir, const std::string& store_dir,
    std::chrono::milliseconds lock_wait = kDefaultViewStoreLockWait);

}  // namespace fcc::driver
