// ViewBinder over FakeHostFs: a bind is a (foreign, read-only) mount in the
// fake with the identity of what it binds, and any call can be made to
// fail. With FaultyHostFs, the view publisher runs without root or mounts.
#pragma once

#include <map>
#include <string>

#include "driver/view/binder.h"
#include "fake_host_fs.h"

namespace fcc::testing {

enum class BinderOp { kBindSealed, kMakePrivate, kStageSealed, kFromStaging };

class FakeViewBinder final : public driver::ViewBinder {
 public:
  explicit FakeViewBinder(FakeHostFs& fs) : fs_(fs) {}

  // What `path` (a view's copy) is, as the catalog knows it.
  void SetId(const std::string& path, driver::FileId id) { ids_[path] = id; }
  // The next call of `op` fails with `err`.
  void FailNext(BinderOp op, int err) { fail_[op] = err; }
  // A bind at `target` that lost its seal (as an older release made it).
  void Unseal(const std::string& target) { binds_[target].sealed = false; }

  std::expected<driver::FileId, std::error_code> Identify(
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
  struct Bind {
    driver::FileId id;
    bool sealed = true;
  };
  std::error_code Injected(BinderOp op);
  std::error_code Add(const std::string& target, Bind bind);

  FakeHostFs& fs_;
  std::map<std::string, driver::FileId> ids_;
  std::map<std::string, Bind> binds_;
  std::map<BinderOp, int> fail_;
};

}  // namespace fcc::testing
