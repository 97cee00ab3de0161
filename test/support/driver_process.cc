#include "driver_process.h"

#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>
#include <thread>

#include "csi_client.h"

namespace fcc::testing {

namespace {

// A seccomp program answering ENOSYS to each of `syscalls` and allowing
// everything else. Built before fork: the child only installs it.
std::vector<sock_filter> HideSyscallsProgram(const std::vector<int>& syscalls) {
  std::vector<sock_filter> program = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr))};
  for (const int nr : syscalls) {
    program.push_back(
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<unsigned>(nr), 0, 1));
    program.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS));
  }
  program.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  return program;
}

}  // namespace

std::string DriverProcess::DefaultDriverBinary() {
  const char* other = getenv("FCC_TEST_DRIVER_BINARY");
  return other != nullptr && *other != '\0' ? other : FCC_DRIVER_BINARY;
}

DriverProcess::DriverProcess(Options options) : options_(std::move(options)) {}

DriverProcess::~DriverProcess() {
  if (pid_ > 0) Kill9();
}

pid_t DriverProcess::Spawn() {
  std::vector<std::string> args = {
      options_.binary,
      "--log-level=" + options_.log_level,
      "serve",
      "--endpoint=unix://" + options_.socket_path,
      "--node-id=" + options_.node_id,
      "--master-key-file=" + options_.master_key_file,
  };
  if (!options_.kubelet_dir.empty()) {
    args.push_back("--kubelet-dir=" + options_.kubelet_dir);
  }
  args.insert(args.end(), options_.extra_args.begin(),
              options_.extra_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = options_.env;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<sock_filter> filter =
      HideSyscallsProgram(options_.hidden_syscalls);
  const sock_fprog hide{static_cast<unsigned short>(filter.size()),
                        filter.data()};

  const pid_t pid = fork();
  if (pid == 0) {
    if (!options_.log_path.empty()) {
      const int fd = open(options_.log_path.c_str(),
                          O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
      if (fd >= 0) {
        dup2(fd, STDERR_FILENO);
        dup2(fd, STDOUT_FILENO);
      }
    }
    if (options_.max_open_files > 0) {
      const rlim_t limit = options_.max_open_files;
      const rlimit nofile{limit, limit};
      if (setrlimit(RLIMIT_NOFILE, &nofile) != 0) _exit(126);
    }
    if (!options_.cgroup_procs.empty()) {
      const int fd = open(options_.cgroup_procs.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0 || write(fd, "0", 1) != 1) _exit(125);
      close(fd);
    }
    if (!options_.hidden_syscalls.empty() &&
        (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
         prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &hide) != 0)) {
      _exit(124);
    }
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  return pid;
}

bool DriverProcess::Start(std::chrono::milliseconds timeout) {
  pid_ = Spawn();
  if (pid_ <= 0) return false;
  CsiClient client(options_.socket_path);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    if (access(options_.socket_path.c_str(), F_OK) == 0 &&
        client.WaitReady(std::chrono::milliseconds(500))) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

int DriverProcess::WaitExit(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Kill9();
  return -1;
}

int DriverProcess::RunToExit(std::chrono::milliseconds timeout) {
  pid_ = Spawn();
  return WaitExit(timeout);
}

void DriverProcess::Kill9() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

int DriverProcess::Terminate(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  return WaitExit(timeout);
}

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool MountApiIsMount2() {
  const char* forced = std::getenv("MOUNT_API");
  return forced != nullptr && std::string_view(forced) == "mount";
}

MountApiLog ExpectedMountApiLog() {
  static constexpr char kMount2[] = "mounting volumes with mount(2)";
  static constexpr char kFsmount[] = "mounting volumes with fsopen/fsmount";
  if (MountApiIsMount2()) return {kMount2, kFsmount};
  return {kFsmount, kMount2};
}

}  // namespace fcc::testing
