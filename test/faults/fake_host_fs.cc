#include "fake_host_fs.h"

#include <cerrno>
#include <sstream>

#include "common/volume_contract.h"

namespace fcc::testing {
namespace {

using driver::FileSnapshot;
using driver::FsInfo;
using driver::PathKind;

std::error_code Err(int e) { return {e, std::system_category()}; }

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == 0 || slash == std::string::npos) return "/";
  return path.substr(0, slash);
}

}  // namespace

FakeHostFs::FakeHostFs() { host_.nodes["/"] = Node{}; }

FakeHostFs::Where FakeHostFs::Resolve(const std::string& path) {
  // The innermost mount at or above `path` holds it (a mount hides what
  // lies beneath it, as in the kernel).
  for (std::string p = path;; p = Parent(p)) {
    auto it = mounts_.find(p);
    if (it != mounts_.end() && !it->second.empty()) {
      std::string rel = path.substr(p == "/" ? 0 : p.size());
      if (p == "/" && rel == "/") rel = "";
      return {&it->second.back(), rel};
    }
    if (p == "/") break;
  }
  return {&host_, path};
}

const FakeHostFs::Node* FakeHostFs::Find(const std::string& path) {
  Where w = Resolve(path);
  auto it = w.layer->nodes.find(w.rel);
  return it == w.layer->nodes.end() ? nullptr : &it->second;
}

bool FakeHostFs::HasMountsBelow(const std::string& path) const {
  for (const auto& [p, stack] : mounts_) {
    if (!stack.empty() && p.starts_with(path + "/")) return true;
  }
  return false;
}

std::error_code FakeHostFs::AddNode(const std::string& path, Node node) {
  const Node* parent = Find(Parent(path));
  if (parent == nullptr) return Err(ENOENT);
  if (parent->kind != Node::kDir) return Err(ENOTDIR);
  if (Find(path) != nullptr || MountCount(path) > 0) return Err(EEXIST);
  Where w = Resolve(path);
  if (w.layer->read_only) return Err(EROFS);
  if (w.layer->size_limit > 0 && node.kind == Node::kFile) {
    size_t used = node.content.size();
    for (const auto& [rel, n] : w.layer->nodes) used += n.content.size();
    if (used > w.layer->size_limit) return Err(ENOSPC);
  }
  w.layer->nodes[w.rel] = std::move(node);
  return {};
}

void FakeHostFs::AddDir(const std::string& path, mode_t mode) {
  std::lock_guard lock(mu_);
  if (path != "/" && Find(Parent(path)) == nullptr) AddDir(Parent(path));
  AddNode(path, Node{.kind = Node::kDir, .mode = mode, .content = {}});
}

void FakeHostFs::AddFile(const std::string& path, const std::string& content,
                         mode_t mode, uid_t uid, gid_t gid) {
  std::lock_guard lock(mu_);
  AddNode(path, Node{.kind = Node::kFile,
                     .mode = mode,
                     .uid = uid,
                     .gid = gid,
                     .content = content});
}

void FakeHostFs::AddSymlink(const std::string& path) {
  std::lock_guard lock(mu_);
  AddNode(path, Node{.kind = Node::kSymlink, .mode = 0777, .content = {}});
}

void FakeHostFs::AddForeignMount(const std::string& target, bool read_only) {
  std::lock_guard lock(mu_);
  Layer layer;
  layer.tmpfs = true;
  layer.read_only = read_only;
  layer.source = "foreign";
  layer.nodes[""] = Node{};
  mounts_[target].push_back(std::move(layer));
}

bool FakeHostFs::HoldsForeign(const std::string& target) {
  std::lock_guard lock(mu_);
  if (auto it = mounts_.find(target); it != mounts_.end()) {
    for (const Layer& layer : it->second) {
      if (layer.source != common::kDriverName) return true;
    }
  }
  const Node* node = Find(target);
  return node != nullptr && node->kind != Node::kDir;
}

void FakeHostFs::ClearForeign(const std::string& target) {
  std::lock_guard lock(mu_);
  if (auto it = mounts_.find(target); it != mounts_.end()) {
    std::erase_if(it->second, [](const Layer& layer) {
      return layer.source != common::kDriverName;
    });
    if (it->second.empty()) mounts_.erase(it);
  }
  const Where w = Resolve(target);
  auto node = w.layer->nodes.find(w.rel);
  if (node != w.layer->nodes.end() && node->second.kind != Node::kDir) {
    w.layer->nodes.erase(node);
  }
}

int FakeHostFs::MountCount(const std::string& path) const {
  std::lock_guard lock(mu_);
  auto it = mounts_.find(path);
  return it == mounts_.end() ? 0 : static_cast<int>(it->second.size());
}

int FakeHostFs::TotalMounts() const {
  std::lock_guard lock(mu_);
  int total = 0;
  for (const auto& [p, stack] : mounts_) total += stack.size();
  return total;
}

bool FakeHostFs::Exists(const std::string& path) const {
  std::lock_guard lock(mu_);
  return const_cast<FakeHostFs*>(this)->Find(path) != nullptr;
}

std::string FakeHostFs::Dump() const {
  std::lock_guard lock(mu_);
  std::ostringstream out;
  auto dump_layer = [&](const Layer& layer) {
    out << (layer.tmpfs ? "tmpfs " : "host ") << layer.source
        << (layer.read_only ? " ro" : " rw") << "\n";
    for (const auto& [rel, n] : layer.nodes) {
      out << "  " << rel << " kind=" << n.kind << " mode=" << std::oct << n.mode
          << std::dec << " owner=" << n.uid << ":" << n.gid
          << " bytes=" << n.content << "\n";
    }
  };
  dump_layer(host_);
  for (const auto& [p, stack] : mounts_) {
    for (size_t i = 0; i < stack.size(); ++i) {
      out << "mount " << p << " #" << i << ": ";
      dump_layer(stack[i]);
    }
  }
  return out.str();
}

PathKind FakeHostFs::Inspect(const std::string& path) {
  std::lock_guard lock(mu_);
  if (MountCount(path) > 0) return PathKind::kMountRoot;
  const Node* n = Find(path);
  if (n == nullptr) return PathKind::kMissing;
  switch (n->kind) {
    case Node::kDir:
      return PathKind::kDirectory;
    case Node::kSymlink:
      return PathKind::kSymlink;
    case Node::kFile:
      return PathKind::kOther;
  }
  return PathKind::kOther;
}

std::error_code FakeHostFs::MakeDir(const std::string& path, mode_t mode) {
  std::lock_guard lock(mu_);
  return AddNode(path, Node{.kind = Node::kDir, .mode = mode, .content = {}});
}

std::error_code FakeHostFs::Remove(const std::string& path) {
  std::lock_guard lock(mu_);
  if (MountCount(path) > 0 || HasMountsBelow(path)) return Err(EBUSY);
  Where w = Resolve(path);
  auto it = w.layer->nodes.find(w.rel);
  if (it == w.layer->nodes.end()) return {};
  if (it->second.kind != Node::kDir) return Err(ENOTDIR);  // rmdir only
  {
    auto child = w.layer->nodes.lower_bound(w.rel + "/");
    if (child != w.layer->nodes.end() &&
        child->first.starts_with(w.rel + "/")) {
      return Err(ENOTEMPTY);
    }
  }
  if (w.layer->read_only) return Err(EROFS);
  w.layer->nodes.erase(it);
  return {};
}

FakeHostFs::Layer FakeHostFs::NewTmpfs(const driver::TmpfsSpec& spec) {
  Layer layer;
  layer.tmpfs = true;
  layer.source = common::kDriverName;
  layer.size_limit = spec.size_bytes;
  layer.nr_inodes = spec.nr_inodes;
  layer.nodes[""] = Node{.kind = Node::kDir,
                         .mode = spec.mode,
                         .uid = spec.uid,
                         .gid = spec.gid,
                         .content = {}};
  return layer;
}

void FakeHostFs::AddHalfMadeMount(const std::string& target) {
  std::lock_guard lock(mu_);
  mounts_[target].push_back(
      NewTmpfs({.size_bytes = 16384, .nr_inodes = 8, .mode = 0500}));
}

class FakeHostFs::Pending final : public driver::PendingMount {
 public:
  Pending(FakeHostFs& fs, Layer layer) : fs_(fs), layer_(std::move(layer)) {}

  std::error_code WriteNewFile(const std::string& name,
                               std::string_view content, mode_t mode, uid_t uid,
                               gid_t gid) override {
    const std::string rel = "/" + name;
    if (layer_.read_only) return Err(EROFS);
    if (layer_.nodes.contains(rel)) return Err(EEXIST);
    if (layer_.size_limit > 0 && content.size() > layer_.size_limit) {
      return Err(ENOSPC);
    }
    layer_.nodes[rel] = Node{.kind = Node::kFile,
                             .mode = mode,
                             .uid = uid,
                             .gid = gid,
                             .content = std::string(content)};
    return {};
  }

  std::error_code MakeReadOnly() override {
    layer_.read_only = true;
    return {};
  }

  std::error_code Attach(const std::string& target) override {
    return fs_.AttachLayer(std::move(layer_), target);
  }

 private:
  FakeHostFs& fs_;
  Layer layer_;
};

std::expected<std::unique_ptr<driver::PendingMount>, std::error_code>
FakeHostFs::MakeTmpfs(const driver::TmpfsSpec& spec) {
  return std::make_unique<Pending>(*this, NewTmpfs(spec));
}

std::error_code FakeHostFs::AttachLayer(Layer layer,
                                        const std::string& target) {
  std::lock_guard lock(mu_);
  const PathKind kind = Inspect(target);
  if (kind == PathKind::kMissing) return Err(ENOENT);
  if (kind != PathKind::kDirectory && kind != PathKind::kMountRoot) {
    return Err(ENOTDIR);
  }
  mounts_[target].push_back(std::move(layer));
  return {};
}

std::error_code FakeHostFs::Unmount(const std::string& target) {
  std::lock_guard lock(mu_);
  auto it = mounts_.find(target);
  if (it == mounts_.end() || it->second.empty()) return Err(EINVAL);
  it->second.pop_back();  // lazily detached if busy, like LinuxHostFs
  if (it->second.empty()) mounts_.erase(it);
  return {};
}

std::expected<FileSnapshot, std::error_code> FakeHostFs::ReadFile(
    const std::string& path, size_t max_bytes) {
  std::lock_guard lock(mu_);
  const Node* n = Find(path);
  if (n == nullptr) return std::unexpected(Err(ENOENT));
  if (n->kind == Node::kSymlink) return std::unexpected(Err(ELOOP));
  FileSnapshot snap;
  snap.mode = n->mode;
  snap.uid = n->uid;
  snap.gid = n->gid;
  snap.regular = n->kind == Node::kFile;
  if (snap.regular)
    snap.content = curve::Secret(n->content.substr(0, max_bytes));
  return snap;
}

std::expected<FsInfo, std::error_code> FakeHostFs::StatFs(
    const std::string& path) {
  std::lock_guard lock(mu_);
  if (Find(path) == nullptr) return std::unexpected(Err(ENOENT));
  Where w = Resolve(path);
  return FsInfo{.is_tmpfs = w.layer->tmpfs,
                .read_only = w.layer->read_only,
                .max_inodes = w.layer->nr_inodes};
}

const char* OpName(Op op) {
  static constexpr const char* kNames[] = {
      "Inspect", "MakeDir", "Remove", "Mount",  "Remount", "Unmount",
      "Write",   "Read",    "StatFs", "Attach", "?"};
  return kNames[static_cast<size_t>(op)];
}

void FaultyHostFs::Fail(Op op, int err, int nth) {
  std::lock_guard lock(mu_);
  rules_.push_back(Rule{op, err, nth});
}

void FaultyHostFs::Clear() {
  std::lock_guard lock(mu_);
  rules_.clear();
}

int FaultyHostFs::Calls(Op op) const {
  std::lock_guard lock(mu_);
  return calls_[static_cast<size_t>(op)];
}

int FaultyHostFs::Injected() const {
  std::lock_guard lock(mu_);
  return injected_;
}

int FaultyHostFs::Check(Op op) {
  std::lock_guard lock(mu_);
  ++calls_[static_cast<size_t>(op)];
  int err = 0;
  for (Rule& rule : rules_) {
    if (rule.op != op) continue;
    ++rule.seen;
    if (err == 0 && (rule.nth == 0 || rule.nth == rule.seen)) err = rule.err;
  }
  if (err != 0) ++injected_;
  return err;
}

PathKind FaultyHostFs::Inspect(const std::string& path) {
  if (Check(Op::kInspect)) return PathKind::kUnreadable;
  return inner_.Inspect(path);
}
std::error_code FaultyHostFs::MakeDir(const std::string& path, mode_t mode) {
  if (int e = Check(Op::kMakeDir)) return Err(e);
  return inner_.MakeDir(path, mode);
}
std::error_code FaultyHostFs::Remove(const std::string& path) {
  if (int e = Check(Op::kRemove)) return Err(e);
  return inner_.Remove(path);
}

class FaultyHostFs::Pending final : public driver::PendingMount {
 public:
  Pending(FaultyHostFs& faulty, std::unique_ptr<driver::PendingMount> inner)
      : faulty_(faulty), inner_(std::move(inner)) {}

  std::error_code WriteNewFile(const std::string& name,
                               std::string_view content, mode_t mode, uid_t uid,
                               gid_t gid) override {
    if (int e = faulty_.Check(Op::kWrite)) return Err(e);
    return inner_->WriteNewFile(name, content, mode, uid, gid);
  }
  std::error_code MakeReadOnly() override {
    if (int e = faulty_.Check(Op::kRemount)) return Err(e);
    return inner_->MakeReadOnly();
  }
  std::error_code Attach(const std::string& target) override {
    if (int e = faulty_.Check(Op::kAttach)) return Err(e);
    return inner_->Attach(target);
  }

 private:
  FaultyHostFs& faulty_;
  std::unique_ptr<driver::PendingMount> inner_;
};

std::expected<std::unique_ptr<driver::PendingMount>, std::error_code>
FaultyHostFs::MakeTmpfs(const driver::TmpfsSpec& spec) {
  if (int e = Check(Op::kMount)) return std::unexpected(Err(e));
  auto inner = inner_.MakeTmpfs(spec);
  if (!inner) return inner;
  return std::make_unique<Pending>(*this, std::move(*inner));
}

std::error_code FaultyHostFs::Unmount(const std::string& target) {
  if (int e = Check(Op::kUnmount)) return Err(e);
  return inner_.Unmount(target);
}
std::expected<FileSnapshot, std::error_code> FaultyHostFs::ReadFile(
    const std::string& path, size_t max_bytes) {
  if (int e = Check(Op::kRead)) return std::unexpected(Err(e));
  return inner_.ReadFile(path, max_bytes);
}
std::expected<FsInfo, std::error_code> FaultyHostFs::StatFs(
    const std::string& path) {
  if (int e = Check(Op::kStatFs)) return std::unexpected(Err(e));
  return inner_.StatFs(path);
}

}  // namespace fcc::testing
