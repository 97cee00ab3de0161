// The node's store of view copies (view/catalog.h), shared by every driver
// process on the node (a rolling update's overlap, a double install):
//
//   <store>/.lock                      flock(2)ed by an installer
//   <store>/<name>@<16 hex>/           a copy; its servers flock it shared
//   <store>/<name>@<16 hex>.verified   its digest, once the copy matched it
//   <store>/.tmp-<name>@<16 hex>-XXXXXX  a copy being written
//
// A copy is written under a unique temporary name, synced, hashed against
// its manifest's digest and only then renamed into place and marked, so a
// copy's name never shows a partial or unsynced tree, and a restart does
// not hash it again. A copy without its marker is never served: it is moved
// aside and copied afresh. Copies that no driver serves and no pod mounts
// are removed.
#pragma once

#include <chrono>
#include <expected>
#include <filesystem>
#include <set>
#include <string>
#include <string_view>

#include "common/unique_fd.h"

namespace fcc::driver {

// "sha256:<64 hex>" of the tree at `dir` as images/view/README.md
// ("Manifest") defines it, check-view's tree_digest: every entry but
// `skip` (a path relative to `dir`), sorted by relative path, each as
// "path NUL type NUL octal mode NUL payload LF".
std::expected<std::string, std::string> TreeDigest(const std::string& dir,
                                                   std::string_view skip);

// The store entries (names directly under `store`, a canonical path) that
// a mount in `mountinfo` shows: its root is the entry or under it, on the
// filesystem the store is on. Hidden (stacked) mounts count too.
std::set<std::string> StoreEntriesMounted(std::string_view mountinfo,
                                          const std::string& store);

class ViewStore {
 public:
  // Creates `dir` if needed and takes its lock, waiting up to `wait` while
  // another driver installs: a driver stuck installing (a hung disk) must
  // not keep this one from serving certs. The error names the holder where
  // /proc/locks shows it. Released when the ViewStore goes.
  static std::expected<ViewStore, std::string> Lock(
      const std::string& dir, std::chrono::milliseconds wait);

  // `stored_name`'s copy of the view at `source`, whose manifest says
  // `digest`: the marked copy if there is one, else one made anew. Returns its
  // path; the error says why not (no prefix).
  std::expected<std::string, std::string> Install(
      const std::filesystem::path& source, const std::string& stored_name,
      const std::string& digest);

  // A shared lock on a copy that this process serves, for as long as the
  // fd is open: Collect in another driver leaves the copy alone.
  static std::expected<common::UniqueFd, std::string> Hold(
      const std::string& path);

  // Removes every copy, marker and temporary not in `keep` (names) that no
  // pod mounts and no other driver holds. Logs what it removes and why it
  // keeps what it keeps; an unreadable mount table removes nothing.
  void Collect(const std::set<std::string>& keep);

 private:
  ViewStore(std::filesystem::path dir, common::UniqueFd lock)
      : dir_(std::move(dir)), lock_(std::move(lock)) {}

  std::expected<void, std::string> MakeCopy(const std::filesystem::path& source,
                                            const std::string& stored_name,
                                            const std::string& digest);
  void MoveAside(const std::string& stored_name);

  std::filesystem::path dir_;
  common::UniqueFd lock_;
};

}  // namespace fcc::driver
