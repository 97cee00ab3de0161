#include "mount_env.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace fcc::testing {
namespace {

std::string Link(const char* path) {
  std::error_code ec;
  auto target = std::filesystem::read_symlink(path, ec);
  return ec ? "" : target.string();
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      out.push_back(
          static_cast<char>(std::stoi(s.substr(i + 1, 3), nullptr, 8)));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

std::string MountEnvProblem() {
  if (geteuid() != 0) return "needs root (mounts tmpfs)";
  const std::string self = Link("/proc/self/ns/mnt");
  const std::string init = Link("/proc/1/ns/mnt");
  if (self.empty() || self == init) {
    return "refusing to mount in the host's mount namespace: run the tests "
           "through scripts/test (unshare -m --propagation private)";
  }
  return "";
}

ScratchRoot::ScratchRoot() {
  char templ[] = "/tmp/fcc-test-XXXXXX";
  if (mkdtemp(templ) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = templ;
  if (mount("fcc-test", path_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
            "size=64m,mode=0700") != 0) {
    throw std::runtime_error("cannot mount the scratch tmpfs at " + path_);
  }
  std::filesystem::create_directories(pods_dir());
  std::filesystem::create_directories(path_ + "/logs");
}

ScratchRoot::~ScratchRoot() {
  // Unmount whatever tests left below (they assert on leaks themselves).
  auto mounts = MountsUnder(path_);
  for (auto it = mounts.rbegin(); it != mounts.rend(); ++it) {
    umount2(it->mount_point.c_str(), MNT_DETACH);
  }
  umount2(path_.c_str(), MNT_DETACH);
  rmdir(path_.c_str());
}

std::string ScratchRoot::WriteMasterKey(const std::string& name,
                                        const std::string& bytes,
                                        unsigned mode) const {
  const std::string file = path_ + "/" + name;
  const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || write(fd, bytes.data(), bytes.size()) !=
                    static_cast<ssize_t>(bytes.size())) {
    throw std::runtime_error("cannot write " + file);
  }
  fchmod(fd, mode);
  close(fd);
  return file;
}

std::vector<MountEntry> MountsUnder(const std::string& prefix,
                                    const std::string& mountinfo) {
  std::vector<MountEntry> out;
  std::ifstream in(mountinfo);
  std::string line;
  while (std::getline(in, line)) {
    // id parent major:minor root mount_point options [optional...] - type
    // source super_options
    std::istringstream fields(line);
    std::string id, parent, dev, root, mount_point, options, word;
    fields >> id >> parent >> dev >> root >> mount_point >> options;
    while (fields >> word && word != "-") {
    }
    MountEntry entry;
    fields >> entry.fs_type >> entry.source >> entry.super_options;
    entry.mount_point = Unescape(mount_point);
    entry.options = options;
    entry.source = Unescape(entry.source);
    if (entry.mount_point == prefix ||
        entry.mount_point.starts_with(prefix + "/")) {
      out.push_back(std::move(entry));
    }
  }
  return out;
}

int MountCountAt(const std::string& path) {
  int count = 0;
  for (const auto& m : MountsUnder(path)) {
    if (m.mount_point == path) ++count;
  }
  return count;
}

PeerMountNamespace::PeerMountNamespace() {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return;
  pid_ = fork();
  if (pid_ == 0) {
    // Only async-signal-safe calls: the test process has threads.
    const char ok = unshare(CLONE_NEWNS) == 0 ? '1' : '0';
    if (write(ready[1], &ok, 1) != 1) _exit(1);
    for (;;) pause();
  }
  close(ready[1]);
  char ok = '0';
  if (pid_ > 0 && (read(ready[0], &ok, 1) != 1 || ok != '1')) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  close(ready[0]);
}

PeerMountNamespace::~PeerMountNamespace() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

std::vector<MountEntry> PeerMountNamespace::MountsUnder(
    const std::string& prefix) const {
  return fcc::testing::MountsUnder(
      prefix, "/proc/" + std::to_string(pid_) + "/mountinfo");
}

std::string PeerMountNamespace::Path(const std::string& path) const {
  return "/proc/" + std::to_string(pid_) + "/root" + path;
}

bool KernelAtLeast(int major, int minor) {
  utsname name{};
  if (uname(&name) != 0) return false;
  int running_major = 0;
  int running_minor = 0;
  if (std::sscanf(name.release, "%d.%d", &running_major, &running_minor) != 2) {
    return false;
  }
  return running_major > major ||
         (running_major == major && running_minor >= minor);
}

}  // namespace fcc::testing
