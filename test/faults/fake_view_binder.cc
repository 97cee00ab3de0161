#include "fake_view_binder.h"

#include <cerrno>
#include <functional>

namespace fcc::testing {

std::error_code FakeViewBinder::Injected(BinderOp op) {
  auto it = fail_.find(op);
  if (it == fail_.end()) return {};
  const int err = it->second;
  fail_.erase(it);
  return {err, std::generic_category()};
}

std::error_code FakeViewBinder::Add(const std::string& target, Bind bind) {
  if (fs_.Inspect(target) == driver::PathKind::kMissing) {
    return {ENOENT, std::generic_category()};
  }
  fs_.AddForeignMount(target, /*read_only=*/true);
  binds_[target] = bind;
  return {};
}

std::expected<driver::FileId, std::error_code> FakeViewBinder::Identify(
    const std::string& path) {
  if (fs_.MountCount(path) > 0) {
    if (auto it = binds_.find(path); it != binds_.end()) return it->second.id;
  }
  if (auto it = ids_.find(path); it != ids_.end()) return it->second;
  if (fs_.Inspect(path) == driver::PathKind::kMissing) {
    return std::unexpected(std::error_code(ENOENT, std::generic_category()));
  }
  return driver::FileId{1, std::hash<std::string>{}(path)};
}

std::expected<bool, std::error_code> FakeViewBinder::IsSealed(
    const std::string& path) {
  auto it = binds_.find(path);
  if (fs_.MountCount(path) == 0 || it == binds_.end()) {
    return std::unexpected(std::error_code(EINVAL, std::generic_category()));
  }
  return it->second.sealed;
}

std::error_code FakeViewBinder::BindSealed(const std::string& source,
                                           const std::string& target) {
  if (auto ec = Injected(BinderOp::kBindSealed)) return ec;
  return Add(target, {ids_[source], true});
}

std::error_code FakeViewBinder::MakePrivate(const std::string& dir) {
  if (auto ec = Injected(BinderOp::kMakePrivate)) return ec;
  fs_.AddDir(dir, 0700);
  return {};
}

std::error_code FakeViewBinder::StageSealed(const std::string& source,
                                            const std::string& staging) {
  if (auto ec = Injected(BinderOp::kStageSealed)) return ec;
  return Add(staging, {ids_[source], true});
}

std::error_code FakeViewBinder::BindFromStaging(const std::string& staged,
                                                const std::string& target) {
  if (auto ec = Injected(BinderOp::kFromStaging)) return ec;
  return Add(target, binds_[staged]);
}

}  // namespace fcc::testing
