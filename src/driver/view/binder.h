// The kernel side of view volumes: the binds of a view's copy and the looks
// at them, behind one small interface beside HostFs, so that the view
// publisher's logic runs over a fake too (test/faults).
#pragma once

#include <expected>
#include <string>
#include <system_error>

#include "driver/host_fs.h"
#include "driver/view/catalog.h"

namespace fcc::driver {

class ViewBinder {
 public:
  virtual ~ViewBinder() = default;
  // The identity of what is at `path` (a mount's root, if one is there).
  virtual std::expected<FileId, std::error_code> Identify(
      const std::string& path) = 0;
  // Whether the mount at `path` is read-only, nosuid and nodev.
  virtual std::expected<bool, std::error_code> IsSealed(
      const std::string& path) = 0;
  // kDetached: a clone of `source` made read-only, nosuid and nodev while
  // detached, then attached at `target`, so every mount namespace it
  // propagates to has those flags.
  virtual std::error_code BindSealed(const std::string& source,
                                     const std::string& target) = 0;
  // kStaged: `dir` (made if missing) as a private mount of its own, so
  // nothing bound below it propagates anywhere.
  virtual std::error_code MakePrivate(const std::string& dir) = 0;
  // kStaged, once per copy: `source` bound at `staging`, made private and
  // sealed; a failure undoes the bind.
  virtual std::error_code StageSealed(const std::string& source,
                                      const std::string& staging) = 0;
  // kStaged: the sealed `staged` bind bound at `target`; the new mount (and
  // every copy propagated from it) carries its flags, checked: a bind found
  // unsealed is undone.
  virtual std::error_code BindFromStaging(const std::string& staged,
                                          const std::string& target) = 0;
};

// The real kernel's.
class LinuxViewBinder final : public ViewBinder {
 public:
  // `fs` tells a mount root (MakePrivate), as it does for the cert path.
  explicit LinuxViewBinder(HostFs& fs) : fs_(fs) {}

  std::expected<FileId, std::error_code> Identify(
      const std::string& path) override;
  std::expected<bool, std::error_code> IsSealed(
      const std::string& path) override;
  std::error_code BindSealed(const std::string& source,
                             const std::string& target) override;
  std::error_code MakePrivate(const std::string& dir) override;
  std::error_code StageSealed(const std::string& source,
                              const std::string& staging) override;
  std::error_code BindFromStaging(const std::string& staged,
                                  const std::string& target) override;

 private:
  HostFs& fs_;
};

}  // namespace fcc::driver
