// Test doubles for the driver's kernel interface (driver::HostFs):
// - FakeHostFs: an in-memory model of directories, files and stacked tmpfs
//   mounts, so Publisher can be driven without root and without mounting;
// - FaultyHostFs: wraps any HostFs (the fake or LinuxHostFs) and fails
//   chosen calls with a chosen errno, to show every failure path of the
//   publish/unpublish state machine leaves nothing behind.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "driver/host_fs.h"

namespace fcc::testing {

class FakeHostFs : public driver::HostFs {
 public:
  FakeHostFs();  // "/" exists

  // Set-up (mkdir -p for AddDir; AddFile/AddSymlink need the parent).
  void AddDir(const std::string& path, mode_t mode = 0755);
  void AddFile(const std::string& path, const std::string& content,
               mode_t mode = 0644, uid_t uid = 0, gid_t gid = 0);
  void AddSymlink(const std::string& path);
  // Mounts a tmpfs that is not the driver's (source "foreign").
  void AddForeignMount(const std::string& target, bool read_only);
  // Mounts an empty writable tmpfs with the driver's source: what the old
  // mount(2)-based publish left when killed between mount and write.
  void AddHalfMadeMount(const std::string& target);
  // Whether `target` holds what the driver must leave alone (a mount not
  // its own, or a file or symlink), and its removal by an admin.
  bool HoldsForeign(const std::string& target);
  void ClearForeign(const std::string& target);

  // Observation.
  int MountCount(const std::string& path) const;
  int TotalMounts() const;
  bool Exists(const std::string& path) const;
  // A canonical text of the whole state (tree, mounts, file bytes), to
  // compare before/after a failed call.
  std::string Dump() const;

  driver::PathKind Inspect(const std::string& path) override;
  std::error_code MakeDir(const std::string& path, mode_t mode) override;
  std::error_code Remove(const std::string& path) override;
  std::expected<std::unique_ptr<driver::PendingMount>, std::error_code>
  MakeTmpfs(const driver::TmpfsSpec& spec) override;
  std::error_code Unmount(const std::string& target) override;
  std::expected<driver::FileSnapshot, std::error_code> ReadFile(
      const std::string& path, size_t max_bytes) override;
  std::expected<driver::FsInfo, std::error_code> StatFs(
      const std::string& path) override;

 private:
  struct Node {
    enum Kind { kDir, kFile, kSymlink } kind = kDir;
    mode_t mode = 0755;
    uid_t uid = 0;
    gid_t gid = 0;
    std::string content;
  };
  // One filesystem: the host's, or a tmpfs. Paths are relative to its root
  // ("" is the root directory itself).
  struct Layer {
    std::map<std::string, Node> nodes;
    bool tmpfs = false;
    bool read_only = false;
    std::string source;
    size_t size_limit = 0;   // 0: unlimited
    uint64_t nr_inodes = 0;  // 0: unlimited
  };
  // A detached tmpfs: a layer of its own until Attach hands it to the fake.
  class Pending;
  static Layer NewTmpfs(const driver::TmpfsSpec& spec);
  std::error_code AttachLayer(Layer layer, const std::string& target);
  struct Where {
    Layer* layer = nullptr;
    std::string rel;
  };
  Where Resolve(const std::string& path);
  const Node* Find(const std::string& path);
  bool HasMountsBelow(const std::string& path) const;
  std::error_code AddNode(const std::string& path, Node node);

  mutable std::recursive_mutex mu_;
  Layer host_;
  std::map<std::string, std::vector<Layer>> mounts_;  // target → stack
};

enum class Op {
  kInspect,
  kMakeDir,
  kRemove,
  kMount,    // MakeTmpfs
  kRemount,  // PendingMount::MakeReadOnly
  kUnmount,
  kWrite,  // PendingMount::WriteNewFile
  kRead,
  kStatFs,
  kAttach,  // PendingMount::Attach
  kCount,
};
const char* OpName(Op op);

class FaultyHostFs : public driver::HostFs {
 public:
  explicit FaultyHostFs(driver::HostFs& inner) : inner_(inner) {}

  // Fails calls of `op` with `err`: the `nth` call from now (1-based), or
  // every call if nth is 0. A failing Inspect reports kUnreadable.
  void Fail(Op op, int err, int nth = 0);
  void Clear();
  int Calls(Op op) const;
  int Injected() const;

  driver::PathKind Inspect(const std::string& path) override;
  std::error_code MakeDir(const std::string& path, mode_t mode) override;
  std::error_code Remove(const std::string& path) override;
  std::expected<std::unique_ptr<driver::PendingMount>, std::error_code>
  MakeTmpfs(const driver::TmpfsSpec& spec) override;
  std::error_code Unmount(const std::string& target) override;
  std::expected<driver::FileSnapshot, std::error_code> ReadFile(
      const std::string& path, size_t max_bytes) override;
  std::expected<driver::FsInfo, std::error_code> StatFs(
      const std::string& path) override;

 private:
  struct Rule {
    Op op;
    int err;
    int nth;  // 0: always; else the call number (counted from Fail) to fail
    int seen = 0;
  };
  // The inner pending tmpfs, with faults on its write, seal and attach.
  class Pending;
  // The errno to fail this call with, or 0; counts the call.
  int Check(Op op);

  driver::HostFs& inner_;
  mutable std::mutex mu_;
  std::vector<Rule> rules_;
  std::array<int, static_cast<size_t>(Op::kCount)> calls_{};
  int injected_ = 0;
};

}  // namespace fcc::testing
