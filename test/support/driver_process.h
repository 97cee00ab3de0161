// Runs the real flux-curve-csi binary as a child process ("a node").
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace fcc::testing {

class DriverProcess {
 public:
  struct Options {
    // FCC_TEST_DRIVER_BINARY in the environment names another build (an
    // older one, to show what a new test catches there).
    std::string binary = DefaultDriverBinary();
    std::string socket_path;
    std::string node_id = "node-a";
    std::string master_key_file;
    std::string log_path;  // stderr is appended here
    std::string log_level = "trace";
    // --kubelet-dir: the directory the test's pods dir is in ("": default).
    std::string kubelet_dir;
    std::vector<std::string> extra_args;
    int max_open_files = 0;  // RLIMIT_NOFILE in the child (0: inherited)
    // A cgroup.procs file the child joins before exec ("": the test's own
    // cgroup), so the driver's memory, tmpfs pages included, is charged there.
    std::string cgroup_procs;
    // Syscall numbers the child answers ENOSYS to (a seccomp filter set
    // before exec), as a kernel that lacks them does: e.g. SYS_mount_setattr
    // plays a kernel before 5.12.
    std::vector<int> hidden_syscalls;
    // "NAME=value" added to the child's environment (a flag a driver of
    // another build may not know is then ignored there, not refused).
    std::vector<std::string> env;
  };
  static std::string DefaultDriverBinary();

  explicit DriverProcess(Options options);
  ~DriverProcess();  // SIGKILL if still running
  DriverProcess(const DriverProcess&) = delete;
  DriverProcess& operator=(const DriverProcess&) = delete;

  // Starts the driver and waits until Probe answers ready. False if it exits
  // or does not become ready within `timeout`.
  bool Start(std::chrono::milliseconds timeout = std::chrono::seconds(15));
  // Starts the driver and waits for it to exit; returns its exit code (for
  // start-up refusals).
  int RunToExit(std::chrono::milliseconds timeout = std::chrono::seconds(15));
  void Kill9();
  // SIGTERM and wait; the exit code, or -1 if it had to be killed.
  int Terminate(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  const Options& options() const { return options_; }

 private:
  pid_t Spawn();
  int WaitExit(std::chrono::milliseconds timeout);
  Options options_;
  pid_t pid_ = -1;
};

// Reads a whole file ("" if missing).
std::string ReadFileOrEmpty(const std::string& path);

// The line a driver started from this process logs for its mount API, and
// the line of the other one: MOUNT_API=mount in the environment (the
// *_mount2 ctest entries, which the driver inherits) asks for mount(2),
// else the driver picks fsmount on the test kernels. A pass that claims
// one API and runs the other can then fail.
struct MountApiLog {
  const char* expected;
  const char* other;
};
MountApiLog ExpectedMountApiLog();
// Whether MOUNT_API=mount asks the drivers started from here for mount(2).
bool MountApiIsMount2();

}  // namespace fcc::testing
