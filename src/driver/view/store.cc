#include "driver/view/store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "common/file.h"
#include "common/volume_contract.h"
#include "driver/mountinfo.h"

namespace fcc::driver {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kLockFile = ".lock";
constexpr std::string_view kTmpPrefix = ".tmp-";
constexpr std::string_view kVerifiedSuffix = ".verified";
constexpr size_t kMaxMarkerBytes = 256;

std::string ErrnoText() { return std::strerror(errno); }

// OpenSSL's SHA-256, hex.
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    ok_ = ctx_ && EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) == 1;
  }
  void Update(std::string_view data) {
    ok_ = ok_ && EVP_DigestUpdate(ctx_.get(), data.data(), data.size()) == 1;
  }
  std::expected<std::string, std::string> HexFinal() {
    std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
    unsigned int size = 0;
    if (!ok_ || EVP_DigestFinal_ex(ctx_.get(), md.data(), &size) != 1) {
      return std::unexpected("OpenSSL's SHA-256 failed");
    }
    std::string hex;
    for (unsigned int i = 0; i < size; ++i) hex += fmt::format("{:02x}", md[i]);
    return hex;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
  bool ok_ = false;
};

std::expected<std::string, std::string> FileSha256(const fs::path& path) {
  common::UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd)
    return std::unexpected(fmt::format("{}: {}", path.string(), ErrnoText()));
  Sha256 sha;
  std::vector<char> buffer(size_t{1} << 16);
  for (;;) {
    const ssize_t n = read(fd.get(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return std::unexpected(fmt::format("{}: {}", path.string(), ErrnoText()));
    if (n == 0) break;
    sha.Update(std::string_view(buffer.data(), static_cast<size_t>(n)));
  }
  return sha.HexFinal();
}

struct DigestEntry {
  std::string path;  // relative
  char kind = 'f';
  mode_t mode = 0;
  std::string payload;
};

std::expected<DigestEntry, std::string> DigestEntryOf(const fs::path& file,
                                                      std::string rel) {
  struct stat st{};
  if (lstat(file.c_str(), &st) != 0) {
    return std::unexpected(fmt::format("{}: {}", file.string(), ErrnoText()));
  }
  DigestEntry entry{std::move(rel), 'd', st.st_mode & 07777, ""};
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    entry.kind = 'l';
    entry.payload = fs::read_symlink(file, ec).string();
    if (ec)
      return std::unexpected(
          fmt::format("{}: {}", file.string(), ec.message()));
  } else if (S_ISREG(st.st_mode)) {
    auto sha = FileSha256(file);
    if (!sha) return std::unexpected(sha.error());
    entry.kind = 'f';
    entry.payload = std::move(*sha);
  } else if (!S_ISDIR(st.st_mode)) {
    return std::unexpected(
        fmt::format("{}: not a file, directory or symlink", file.string()));
  }
  return entry;
}

bool SyncPath(const fs::path& path) {
  common::UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  return fd && fsync(fd.get()) == 0;
}

// Gives every entry of `copy` its entry's mode in `source` (copying honours
// the umask, the digest does not) and syncs it to disk.
std::expected<void, std::string> MatchModesAndSync(const fs::path& source,
                                                   const fs::path& copy) {
  std::error_code ec;
  std::vector<fs::path> rels{fs::path()};
  for (auto it = fs::recursive_directory_iterator(source, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    rels.push_back(it->path().lexically_relative(source));
  }
  if (ec)
    return std::unexpected(
        fmt::format("{}: {}", source.string(), ec.message()));
  for (const fs::path& rel : rels) {
    struct stat st{};
    const fs::path target = rel.empty() ? copy : copy / rel;
    if (lstat((rel.empty() ? source : source / rel).c_str(), &st) != 0) {
      return std::unexpected(
          fmt::format("{}: {}", (source / rel).string(), ErrnoText()));
    }
    if (S_ISLNK(st.st_mode)) continue;
    if (chmod(target.c_str(), st.st_mode & 07777) != 0 || !SyncPath(target)) {
      return std::unexpected(
          fmt::format("{}: {}", target.string(), ErrnoText()));
    }
  }
  return {};
}

std::string ReadMarker(const std::string& path) {
  auto text = common::ReadTextFile(path, kMaxMarkerBytes);
  return text ? *text : "";
}

std::expected<void, std::string> WriteMarker(const std::string& path,
                                             const std::string& digest) {
  common::UniqueFd fd(
      open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
           0644));
  const std::string text = digest + "\n";
  if (!fd ||
      write(fd.get(), text.data(), text.size()) !=
          static_cast<ssize_t>(text.size()) ||
      fsync(fd.get()) != 0) {
    return std::unexpected(fmt::format("{}: {}", path, ErrnoText()));
  }
  return {};
}

// A new empty directory <dir>/.tmp-<stem>-XXXXXX, unique among all writers.
std::expected<fs::path, std::string> MakeTempDir(const fs::path& dir,
                                                 const std::string& stem) {
  std::string name =
      (dir / (std::string(kTmpPrefix) + stem + "-XXXXXX")).string();
  if (mkdtemp(name.data()) == nullptr) {
    return std::unexpected(
        fmt::format("mkdtemp in {}: {}", dir.string(), ErrnoText()));
  }
  return fs::path(name);
}

// flock(LOCK_EX) on `fd` within `wait`; the errno if not (EWOULDBLOCK:
// still held by another when the time was up).
std::expected<void, int> LockWithin(int fd, std::chrono::milliseconds wait) {
  constexpr auto kPoll = std::chrono::milliseconds(100);
  const auto deadline = std::chrono::steady_clock::now() + wait;
  bool logged = false;
  for (;;) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return {};
    if (errno != EWOULDBLOCK && errno != EINTR) return std::unexpected(errno);
    if (std::chrono::steady_clock::now() >= deadline) {
      return std::unexpected(EWOULDBLOCK);
    }
    if (!logged) {
      spdlog::info("waiting up to {} ms for another driver installing views",
                   wait.count());
      logged = true;
    }
    std::this_thread::sleep_for(kPoll);
  }
}

// "pid N (comm)" of the process holding a flock on `fd`'s file, as
// /proc/locks shows it, or "another process".
std::string LockHolder(int fd) {
  struct stat st{};
  auto locks = common::ReadTextFile("/proc/locks", size_t{1} << 20);
  if (fstat(fd, &st) != 0 || !locks) return "another process";
  const std::string file_id = fmt::format("{:02x}:{:02x}:{}", major(st.st_dev),
                                          minor(st.st_dev), st.st_ino);
  std::istringstream lines(*locks);
  for (std::string line; std::getline(lines, line);) {
    // "1: FLOCK  ADVISORY  WRITE 1234 08:02:5678 0 EOF"; waiters have "->".
    std::istringstream fields(line);
    std::string id, type, advisory, mode, pid, file;
    fields >> id >> type;
    if (type == "->") fields >> type;
    fields >> advisory >> mode >> pid >> file;
    if (line.find("->") != std::string::npos || type != "FLOCK" ||
        file != file_id) {
      continue;
    }
    auto comm = common::ReadTextFile("/proc/" + pid + "/comm", 64);
    std::string name = comm ? *comm : "";
    if (!name.empty() && name.back() == '\n') name.pop_back();
    return name.empty() ? "pid " + pid : fmt::format("pid {} ({})", pid, name);
  }
  return "another process";
}

bool HeldByAnotherDriver(const fs::path& copy) {
  common::UniqueFd fd(
      open(copy.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  return fd && flock(fd.get(), LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
}

// A copy (<name>@<hex>) or a temporary, not a marker or anything else.
bool IsCollectable(const std::string& name) {
  return name.starts_with(kTmpPrefix) || (name.find('@') != std::string::npos &&
                                          !name.ends_with(kVerifiedSuffix));
}

// `path` below `dir` (both absolute, normalised): the rest, or nullopt.
std::optional<std::string> Below(const std::string& path,
                                 const std::string& dir) {
  if (dir == "/")
    return path.size() > 1 ? std::optional(path.substr(1)) : std::nullopt;
  if (!path.starts_with(dir) || path.size() <= dir.size() + 1 ||
      path[dir.size()] != '/') {
    return std::nullopt;
  }
  return path.substr(dir.size() + 1);
}

}  // namespace

std::expected<std::string, std::string> TreeDigest(const std::string& dir,
                                                   std::string_view skip) {
  std::vector<DigestEntry> entries;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::string rel = it->path().lexically_relative(dir).string();
    if (rel == skip) continue;
    auto entry = DigestEntryOf(it->path(), std::move(rel));
    if (!entry) return std::unexpected(entry.error());
    entries.push_back(std::move(*entry));
  }
  if (ec) return std::unexpected(fmt::format("{}: {}", dir, ec.message()));
  // Byte order of the paths, as check-view sorts them.
  std::ranges::sort(entries, {}, &DigestEntry::path);
  Sha256 sha;
  for (const DigestEntry& e : entries) {
    std::string line = e.path;
    line += '\0';
    line += e.kind;
    line += '\0';
    line += fmt::format("{:o}", e.mode);
    line += '\0';
    line += e.payload;
    line += '\n';
    sha.Update(line);
  }
  auto hex = sha.HexFinal();
  if (!hex) return std::unexpected(hex.error());
  return "sha256:" + *hex;
}

std::set<std::string> StoreEntriesMounted(std::string_view mountinfo,
                                          const std::string& store) {
  std::vector<MountInfoLine> mounts;
  std::istringstream lines{std::string(mountinfo)};
  for (std::string line; std::getline(lines, line);) {
    if (auto mount = ParseMountInfoLine(line)) mounts.push_back(*mount);
  }
  // The mount the store is on: the deepest mount point above it, the top
  // of a stack (later lines are newer).
  const MountInfoLine* home = nullptr;
  std::string rest;
  for (const MountInfoLine& mount : mounts) {
    std::optional<std::string> below = Below(store, mount.mount_point);
    if (store == mount.mount_point) below = "";
    if (below && (home == nullptr ||
                  mount.mount_point.size() >= home->mount_point.size())) {
      home = &mount;
      rest = *below;
    }
  }
  std::set<std::string> mounted;
  if (home == nullptr) return mounted;
  // The store as a path within its filesystem, as mount roots are shown.
  std::string store_in_fs = home->root;
  if (!rest.empty()) store_in_fs += (store_in_fs == "/" ? "" : "/") + rest;
  for (const MountInfoLine& mount : mounts) {
    if (mount.device != home->device) continue;
    if (auto below = Below(mount.root, store_in_fs)) {
      mounted.insert(below->substr(0, below->find('/')));
    }
  }
  return mounted;
}

std::expected<ViewStore, std::string> ViewStore::Lock(
    const std::string& dir, std::chrono::milliseconds wait) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return std::unexpected(fmt::format("cannot create --view-store-dir {}: {}",
                                       dir, ec.message()));
  }
  const fs::path lock_path = fs::path(dir) / kLockFile;
  common::UniqueFd lock(
      open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!lock) {
    return std::unexpected(fmt::format("cannot open the store's lock {}: {}",
                                       lock_path.string(), ErrnoText()));
  }
  if (auto locked = LockWithin(lock.get(), wait); !locked) {
    if (locked.error() != EWOULDBLOCK) {
      return std::unexpected(fmt::format("cannot lock {}: {}",
                                         lock_path.string(),
                                         std::strerror(locked.error())));
    }
    return std::unexpected(fmt::format(
        "another driver has been installing views into {} for more than {} "
        "s ({} holds {}); certs are served meanwhile",
        dir, std::chrono::duration_cast<std::chrono::seconds>(wait).count(),
        LockHolder(lock.get()), lock_path.string()));
  }
  return ViewStore(fs::path(dir), std::move(lock));
}

std::expected<std::string, std::string> ViewStore::Install(
    const fs::path& source, const std::string& stored_name,
    const std::string& digest) {
  const fs::path copy = dir_ / stored_name;
  const std::string marker = copy.string() + std::string(kVerifiedSuffix);
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(copy, ec))) {
    if (ReadMarker(marker) == digest + "\n") return copy.string();
    // Unmarked: cut short by a crash, or made by a release that bound
    // copies writable into pods. One of those may still write into it
    // after any check here, so it is never served: a fresh copy is.
    spdlog::warn("view copy {} has no verified marker; copying afresh",
                 copy.string());
    MoveAside(stored_name);
  }
  if (auto made = MakeCopy(source, stored_name, digest); !made) {
    return std::unexpected(made.error());
  }
  return copy.string();
}

std::expected<void, std::string> ViewStore::MakeCopy(
    const fs::path& source, const std::string& stored_name,
    const std::string& digest) {
  const auto started = std::chrono::steady_clock::now();
  const fs::path copy = dir_ / stored_name;
  auto tmp = MakeTempDir(dir_, stored_name);
  if (!tmp) return std::unexpected(tmp.error());
  auto fail = [&](std::string why) {
    std::error_code ignored;
    fs::remove_all(*tmp, ignored);
    return std::unexpected(std::move(why));
  };
  std::error_code ec;
  fs::copy(source, *tmp,
           fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
  if (ec) {
    return fail(fmt::format("copying {} to {}: {}", source.string(),
                            (*tmp).string(), ec.message()));
  }
  if (auto synced = MatchModesAndSync(source, *tmp); !synced) {
    return fail("syncing the copy: " + synced.error());
  }
  auto got = TreeDigest(*tmp, common::kViewManifest);
  if (!got) return fail("hashing the copy: " + got.error());
  if (*got != digest) {
    return fail(fmt::format(
        "its files do not match the manifest's digest {}: they hash to {} "
        "(the image's view is damaged or was changed after its build)",
        digest, *got));
  }
  fs::rename(*tmp, copy, ec);
  if (ec) {
    return fail(fmt::format("renaming {} to {}: {}", (*tmp).string(),
                            copy.string(), ec.message()));
  }
  SyncPath(dir_);
  if (auto marked =
          WriteMarker(copy.string() + std::string(kVerifiedSuffix), digest);
      !marked) {
    spdlog::warn("view copy {} verified but not marked: {}", copy.string(),
                 marked.error());
  }
  SyncPath(dir_);
  spdlog::info("view {} copied to {} and verified in {} ms", source.string(),
               copy.string(),
               std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - started)
                   .count());
  return {};
}

// An unmarked copy goes out of the way (a pod's bind of it stays valid);
// Collect removes it once no pod mounts it.
void ViewStore::MoveAside(const std::string& stored_name) {
  std::error_code ec;
  fs::remove(dir_ / (stored_name + std::string(kVerifiedSuffix)), ec);
  auto aside = MakeTempDir(dir_, stored_name);
  if (aside) fs::rename(dir_ / stored_name, *aside, ec);
  if (!aside || ec) {
    spdlog::error("cannot move the unmarked view copy {} aside: {}",
                  (dir_ / stored_name).string(),
                  aside ? ec.message() : aside.error());
  }
}

std::expected<common::UniqueFd, std::string> ViewStore::Hold(
    const std::string& path) {
  common::UniqueFd fd(
      open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd || flock(fd.get(), LOCK_SH | LOCK_NB) != 0) {
    return std::unexpected(fmt::format("{}: {}", path, ErrnoText()));
  }
  return fd;
}

void ViewStore::Collect(const std::set<std::string>& keep) {
  auto mountinfo = ReadMountInfo();
  std::error_code ec;
  const fs::path store = fs::canonical(dir_, ec);
  if (!mountinfo || ec) {
    spdlog::warn("removing no unused view copies from {}: {}", dir_.string(),
                 mountinfo ? ec.message() : mountinfo.error());
    return;
  }
  const std::set<std::string> mounted =
      StoreEntriesMounted(*mountinfo, store.string());
  std::vector<fs::path> entries;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    entries.push_back(entry.path());
  }
  for (const fs::path& path : entries) {
    const std::string name = path.filename().string();
    if (keep.contains(name) || !IsCollectable(name) ||
        !fs::is_directory(fs::symlink_status(path, ec))) {
      continue;
    }
    if (mounted.contains(name)) {
      spdlog::info("keeping view copy {}: a pod mounts it", path.string());
    } else if (HeldByAnotherDriver(path)) {
      spdlog::info("keeping view copy {}: another driver serves it",
                   path.string());
    } else {
      fs::remove(path.string() + std::string(kVerifiedSuffix), ec);
      fs::remove_all(path, ec);
      if (ec) {
        spdlog::warn("cannot remove view copy {}: {}", path.string(),
                     ec.message());
      } else {
        spdlog::info(
            "removed view copy {}: no driver serves it, no pod mounts it",
            path.string());
      }
    }
  }
  for (const fs::path& path : entries) {
    const std::string name = path.filename().string();
    if (!name.ends_with(kVerifiedSuffix)) continue;
    const std::string copy =
        path.string().substr(0, path.string().size() - kVerifiedSuffix.size());
    if (!fs::is_directory(fs::symlink_status(copy, ec))) fs::remove(path, ec);
  }
  SyncPath(dir_);
}

}  // namespace fcc::driver
