// driver_bench: publish/unpublish throughput and latency of the real driver
// over its unix socket, against a floor measured in the same run (the same
// mount/write/chown/remount/umount syscalls in a plain loop, no gRPC), plus
// the driver's memory and its key cache hit rate.
//
// The machine this runs on is shared and noisy, so every figure that matters
// is a ratio against the floor measured minutes apart in the same process.
// It prints numbers; it is not a pass/fail test on time.
#include <absl/synchronization/mutex.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/volume_contract.h"
#include "csi_client.h"
#include "driver_process.h"
#include "mount_env.h"
#include "secret_volume.h"

namespace {

using fcc::testing::CsiClient;
using fcc::testing::DriverProcess;
using fcc::testing::KubeletPod;
using Clock = std::chrono::steady_clock;

// ctest treats this exit code as "skipped" (SKIP_RETURN_CODE).
constexpr int kExitSkip = 77;

struct Args {
  std::vector<int> concurrency = {1, 8, 64};
  std::vector<int> volumes = {2000, 3000, 3000};  // per concurrency level
  // A new connection per call, as kubelet dials: its levels and volumes.
  std::vector<int> per_call_concurrency = {1, 8};
  std::vector<int> per_call_volumes = {1000, 2000};
  int pods_per_minicluster = 8;
  int memory_volumes = 1000;
  int scale_volumes = 5000;  // the driver's volumes held for the scale run
  int scale_sample = 300;    // fresh volumes timed at each scale step
  int warmup = 64;
  std::string csv;
  std::string log_level = "info";  // what the DaemonSet runs with
  std::string owner = "1000:1000";
  // "secret": the key in a Secret volume's layout with --master-key-dir, as
  // the DaemonSet runs (a readlink per publish); "file": --master-key-file.
  std::string key_layout = "secret";
  // The driver binary; a wrapper script (e.g. valgrind) works too.
  std::string driver =
      FCC_DRIVER_BINARY;  // Flux brokers run as a non-root user
};

// The tmpfs the driver mounts per volume (the publisher's TmpfsSpec as
// driver::TmpfsMountData renders it).
// The floor uses plain mount(2) + remount, as issue 7 defines it; the driver
// builds the same tmpfs detached (fsopen/fsmount/move_mount, crash-atomic),
// which costs a few more syscalls per publish.
constexpr unsigned long kTmpfsFlags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
constexpr uid_t kOwnerUid = 1000;
constexpr gid_t kOwnerGid = 1000;
const std::string kTmpfsOptions =
    "size=16384,nr_inodes=8,mode=0500,uid=1000,gid=1000";

// One operation's latencies and the wall time of the phase that ran them.
struct Phase {
  std::vector<double> latency_us;
  double wall_s = 0;
  int errors = 0;
  std::string first_error;

  double PerSecond() const { return latency_us.size() / wall_s; }
  double Mean() const {
    return std::accumulate(latency_us.begin(), latency_us.end(), 0.0) /
           latency_us.size();
  }
  double Quantile(double q) const {
    std::vector<double> sorted = latency_us;
    std::sort(sorted.begin(), sorted.end());
    const size_t i = std::min(sorted.size() - 1,
                              static_cast<size_t>(q * (sorted.size() - 1)));
    return sorted[i];
  }
  double Max() const {
    return *std::max_element(latency_us.begin(), latency_us.end());
  }
};

struct LevelResult {
  std::string impl;  // "driver", "floor" or "floor-api"
  int concurrency = 0;
  Phase publish;
  Phase unpublish;
  // CPU seconds over both phases: the driver process's, and this process's
  // (the floor's syscalls, or the gRPC client standing in for kubelet).
  double driver_cpu_s = 0;
  double self_cpu_s = 0;
  // Mean time inside the driver's handler per call, from its own latency
  // histogram; -1 when unknown (no metrics, or not the driver).
  double publish_handler_us = -1;
  double unpublish_handler_us = -1;
  // Publish+unpublish pairs per second over both phases.
  double PairsPerSecond() const {
    return publish.latency_us.size() / (publish.wall_s + unpublish.wall_s);
  }
};

// Runs op(i) for i in [0, n) on `threads` threads, each call timed.
// op returns "" on success, otherwise the error.
Phase RunPhase(int n, int threads, const std::function<std::string(int)>& op) {
  Phase phase;
  phase.latency_us.assign(n, 0);
  std::atomic<int> next{0};
  std::atomic<int> errors{0};
  std::mutex error_mu;
  const auto start = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = next++; i < n; i = next++) {
        const auto t0 = Clock::now();
        std::string error = op(i);
        const auto t1 = Clock::now();
        phase.latency_us[i] =
            std::chrono::duration<double, std::micro>(t1 - t0).count();
        if (!error.empty()) {
          std::lock_guard lock(error_mu);
          if (errors++ == 0) phase.first_error = std::move(error);
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  phase.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  phase.errors = errors;
  return phase;
}

std::string Errno(const char* what, const std::string& path) {
  return std::string(what) + " " + path + ": " + std::strerror(errno);
}

// The floor: what publishing costs the kernel, with nothing around it.
std::string FloorPublish(const std::string& target, const std::string& cert) {
  if (mkdir(target.c_str(), 0750) != 0) return Errno("mkdir", target);
  if (mount(fcc::common::kDriverName, target.c_str(), "tmpfs", kTmpfsFlags,
            kTmpfsOptions.c_str()) != 0) {
    return Errno("mount", target);
  }
  const std::string file = target + "/curve.cert";
  const int fd = open(file.c_str(),
                      O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) return Errno("open", file);
  const bool ok = write(fd, cert.data(), cert.size()) ==
                      static_cast<ssize_t>(cert.size()) &&
                  fchown(fd, kOwnerUid, kOwnerGid) == 0 &&
                  fchmod(fd, 0400) == 0;
  close(fd);
  if (!ok) return Errno("write/fchown/fchmod", file);
  if (mount(fcc::common::kDriverName, target.c_str(), "tmpfs",
            MS_REMOUNT | MS_RDONLY | kTmpfsFlags, kTmpfsOptions.c_str()) != 0) {
    return Errno("remount", target);
  }
  return "";
}

std::string FloorUnpublish(const std::string& target) {
  if (umount2(target.c_str(), UMOUNT_NOFOLLOW) != 0) {
    return Errno("umount", target);
  }
  if (rmdir(target.c_str()) != 0) return Errno("rmdir", target);
  return "";
}

// `count` kubelet pods, their target parents made (as kubelet does), grouped
// The same work as the driver's syscalls, one for one (LinuxHostFs for a
// fresh publish and a plain unpublish): statx of the target, mkdir, a
// detached tmpfs (fsopen, fsconfig per option, create, fsmount), the cert
// written through the mount fd, superblock and mount made read-only, then
// move_mount; unpublish is statx, umount2, statx, rmdir. Not the issue's
// floor (that is FloorPublish): it shows what the driver adds over the
// syscalls it chose.
bool TargetMissing(const std::string& target) {
  struct statx stx{};
  return statx(AT_FDCWD, target.c_str(), AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT,
               STATX_TYPE, &stx) != 0 &&
         errno == ENOENT;
}

std::string FloorApiPublish(const std::string& target,
                            const std::string& cert) {
  if (!TargetMissing(target)) return Errno("statx (expected ENOENT)", target);
  if (mkdir(target.c_str(), 0750) != 0) return Errno("mkdir", target);
  const int ctx = fsopen("tmpfs", FSOPEN_CLOEXEC);
  if (ctx < 0) return Errno("fsopen", target);
  std::string error;
  int mnt = -1;
  const auto config = [&](const char* key, const char* value) {
    return fsconfig(ctx, FSCONFIG_SET_STRING, key, value, 0) == 0;
  };
  if (!config("source", fcc::common::kDriverName) || !config("size", "16384") ||
      !config("nr_inodes", "8") || !config("mode", "0500") ||
      !config("uid", "1000") || !config("gid", "1000") ||
      fsconfig(ctx, FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
    error = Errno("fsconfig", target);
  } else if ((mnt = fsmount(ctx, FSMOUNT_CLOEXEC,
                            MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                MOUNT_ATTR_NOEXEC)) < 0) {
    error = Errno("fsmount", target);
  } else {
    const int fd =
        openat(mnt, "curve.cert",
               O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0);
    const bool ok = fd >= 0 &&
                    write(fd, cert.data(), cert.size()) ==
                        static_cast<ssize_t>(cert.size()) &&
                    fchown(fd, kOwnerUid, kOwnerGid) == 0 &&
                    fchmod(fd, 0400) == 0;
    if (fd >= 0) close(fd);
    mount_attr attr{};
    attr.attr_set = MOUNT_ATTR_RDONLY;
    if (!ok) {
      error = Errno("openat/write/fchown/fchmod", target);
    } else if (fsconfig(ctx, FSCONFIG_SET_FLAG, "ro", nullptr, 0) != 0 ||
               fsconfig(ctx, FSCONFIG_CMD_RECONFIGURE, nullptr, nullptr, 0) !=
                   0 ||
               mount_setattr(mnt, "", AT_EMPTY_PATH, &attr, sizeof(attr)) !=
                   0) {
      error = Errno("read-only", target);
    } else if (move_mount(mnt, "", AT_FDCWD, target.c_str(),
                          MOVE_MOUNT_F_EMPTY_PATH) != 0) {
      error = Errno("move_mount", target);
    }
  }
  if (mnt >= 0) close(mnt);
  close(ctx);
  return error;
}

std::string FloorApiUnpublish(const std::string& target) {
  struct statx stx{};
  if (statx(AT_FDCWD, target.c_str(), AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT,
            STATX_TYPE, &stx) != 0) {
    return Errno("statx", target);
  }
  if (umount2(target.c_str(), UMOUNT_NOFOLLOW) != 0) {
    return Errno("umount", target);
  }
  if (statx(AT_FDCWD, target.c_str(), AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT,
            STATX_TYPE, &stx) != 0) {
    return Errno("statx", target);
  }
  if (rmdir(target.c_str()) != 0) return Errno("rmdir", target);
  return "";
}

// `count` kubelet pods, their target parents made (as kubelet does), grouped
// pods_per_minicluster to a MiniCluster; `tag` keeps every batch distinct so
// each starts with a cold key cache.
struct Batch {
  std::vector<csi::v1::NodePublishVolumeRequest> requests;
  std::vector<std::string> targets;
};

Batch MakeBatch(const std::string& pods_dir, const std::string& tag, int count,
                const Args& args) {
  Batch batch;
  for (int i = 0; i < count; ++i) {
    KubeletPod pod;
    pod.pods_dir = pods_dir;
    pod.namespace_name = "bench";
    pod.name = "flux-" + std::to_string(i);
    char uid[64];
    std::snprintf(uid, sizeof(uid), "%s-%08d-0000-4000-8000-000000000000",
                  tag.c_str(), i);
    pod.uid = uid;
    fcc::testing::KubeletPrepareParent(pod);
    batch.requests.push_back(fcc::testing::KubeletPublishRequest(
        pod, {{"minicluster",
               tag + "-mc-" + std::to_string(i / args.pods_per_minicluster)},
              {"generation", "6f1c2d3e-" + tag},
              {"owner", args.owner}}));
    batch.targets.push_back(fcc::testing::KubeletTargetPath(pod));
  }
  return batch;
}

std::string StatusError(const grpc::Status& status) {
  if (status.ok()) return "";
  return "code " + std::to_string(status.error_code()) + ": " +
         status.error_message();
}

double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  // Fields after "(comm)": state is field 3, utime 14, stime 15.
  std::istringstream fields(text.substr(text.rfind(')') + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i >= 14) ticks += std::stod(field);
  }
  return ticks / sysconf(_SC_CLK_TCK);
}

double SelfCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& tv) {
    return tv.tv_sec + tv.tv_usec / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// GET /metrics on 127.0.0.1:port, plain HTTP/1.0; "" on failure.
std::string ScrapeMetrics(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string body;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request =
        "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
    if (write(fd, request.data(), request.size()) ==
        static_cast<ssize_t>(request.size())) {
      char buf[4096];
      for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;)
        body.append(buf, n);
    }
  }
  close(fd);
  return body;
}

// The value of an unlabelled sample `name` in Prometheus text, or -1.
double MetricDouble(const std::string& text, const std::string& name) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.starts_with(name + " "))
      return std::stod(line.substr(name.size() + 1));
  }
  return -1;
}

// The same for a counter, rounded.
long MetricValue(const std::string& text, const std::string& name) {
  return std::lround(MetricDouble(text, name));
}

// The port the driver logged for /metrics, or 0.
int MetricsPort(const std::string& log) {
  static const std::regex kPort(
      R"(metrics and /healthz on \S+ \(port (\d+)\))");
  std::smatch m;
  return std::regex_search(log, m, kPort) ? std::stoi(m[1]) : 0;
}

// The driver's own time per call of `rpc` (node_publish, node_unpublish):
// its latency histogram's sum and count, read before and after a phase.
struct HandlerTime {
  double sum_s = -1;
  double count = -1;
};

HandlerTime ReadHandlerTime(int port, const std::string& rpc) {
  if (port == 0) return {};
  const std::string text = ScrapeMetrics(port);
  const std::string name = "flux_curve_csi_" + rpc + "_duration_seconds";
  return {MetricDouble(text, name + "_sum"),
          MetricDouble(text, name + "_count")};
}

double MeanHandlerUs(const HandlerTime& before, const HandlerTime& after) {
  const double n = after.count - before.count;
  if (before.count < 0 || after.count < 0 || n <= 0) return -1;
  return (after.sum_s - before.sum_s) / n * 1e6;
}

LevelResult RunDriver(CsiClient& client, pid_t driver_pid, const Batch& batch,
                      int threads, int metrics_port = 0) {
  LevelResult r;
  r.impl = "driver";
  r.concurrency = threads;
  const int n = static_cast<int>(batch.requests.size());
  const double driver_cpu = ProcessCpuSeconds(driver_pid);
  const double self_cpu = SelfCpuSeconds();
  const HandlerTime publish0 = ReadHandlerTime(metrics_port, "node_publish");
  r.publish = RunPhase(n, threads, [&](int i) {
    return StatusError(client.Publish(batch.requests[i]));
  });
  const HandlerTime unpublish0 =
      ReadHandlerTime(metrics_port, "node_unpublish");
  r.unpublish = RunPhase(n, threads, [&](int i) {
    return StatusError(
        client.Unpublish(batch.requests[i].volume_id(), batch.targets[i]));
  });
  r.driver_cpu_s = ProcessCpuSeconds(driver_pid) - driver_cpu;
  r.publish_handler_us =
      MeanHandlerUs(publish0, ReadHandlerTime(metrics_port, "node_publish"));
  r.unpublish_handler_us = MeanHandlerUs(
      unpublish0, ReadHandlerTime(metrics_port, "node_unpublish"));
  r.self_cpu_s = SelfCpuSeconds() - self_cpu;
  return r;
}

// The gRPC round trip alone: an RPC the driver answers without any work.
std::string NoopCall(CsiClient& client) { return StatusError(client.Noop()); }

Phase RunNoop(CsiClient& client, int n, int threads) {
  return RunPhase(n, threads, [&](int) { return NoopCall(client); });
}

// The composite done serially by the same two processes: a no-op RPC, then
// the driver's syscalls run here. Unlike the sum of two tight loops, it pays
// what alternating between them costs (wake-ups, cold caches), so the
// driver's distance from it is what the driver itself adds.
LevelResult RunNoopThenApi(CsiClient& client, const Batch& batch, int threads,
                           const std::string& cert) {
  LevelResult r;
  r.impl = "noop+api";
  r.concurrency = threads;
  const int n = static_cast<int>(batch.targets.size());
  const double self_cpu = SelfCpuSeconds();
  r.publish = RunPhase(n, threads, [&](int i) {
    std::string error = NoopCall(client);
    return error.empty() ? FloorApiPublish(batch.targets[i], cert) : error;
  });
  r.unpublish = RunPhase(n, threads, [&](int i) {
    std::string error = NoopCall(client);
    return error.empty() ? FloorApiUnpublish(batch.targets[i]) : error;
  });
  r.self_cpu_s = SelfCpuSeconds() - self_cpu;
  return r;
}

// impl "floor": the issue's floor (mount(2)); "floor-api": the driver's own
// syscall sequence (FloorApiPublish).
LevelResult RunFloor(const Batch& batch, int threads, const std::string& cert,
                     const std::string& impl = "floor") {
  LevelResult r;
  r.impl = impl;
  r.concurrency = threads;
  const int n = static_cast<int>(batch.targets.size());
  const bool api = impl == "floor-api";
  const double self_cpu = SelfCpuSeconds();
  r.publish = RunPhase(n, threads, [&](int i) {
    return api ? FloorApiPublish(batch.targets[i], cert)
               : FloorPublish(batch.targets[i], cert);
  });
  r.unpublish = RunPhase(n, threads, [&](int i) {
    return api ? FloorApiUnpublish(batch.targets[i])
               : FloorUnpublish(batch.targets[i]);
  });
  r.self_cpu_s = SelfCpuSeconds() - self_cpu;
  return r;
}

struct Memory {
  long rss_kib = -1;
  long hwm_kib = -1;
  long anon_kib = -1;  // heap and stacks: what the driver itself holds
  long file_kib = -1;  // mapped library pages (shared with other processes)
  int threads = -1;
};

Memory ReadMemory(pid_t pid) {
  Memory m;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    long value = 0;
    fields >> key >> value;
    if (key == "VmRSS:") m.rss_kib = value;
    if (key == "VmHWM:") m.hwm_kib = value;
    if (key == "RssAnon:") m.anon_kib = value;
    if (key == "RssFile:") m.file_kib = value;
    if (key == "Threads:") m.threads = static_cast<int>(value);
  }
  return m;
}

// Publish and unpublish latency against the driver's volumes already on the
// node: a driver that scanned the mount table per call would slow down as
// they grow. floor-api at each step shows what the kernel itself adds.
struct ScalePoint {
  int held = 0;
  LevelResult driver;
  LevelResult api;
  Memory memory;
};

constexpr int kScaleRounds = 3;

std::vector<int> ScaleSteps(int max) {
  std::vector<int> steps = {0, max / 5, max / 2, max};
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  return steps;
}

void Append(Phase& into, const Phase& from) {
  into.latency_us.insert(into.latency_us.end(), from.latency_us.begin(),
                         from.latency_us.end());
  into.wall_s += from.wall_s;
  into.errors += from.errors;
  if (into.first_error.empty()) into.first_error = from.first_error;
}

void Append(LevelResult& into, const LevelResult& from) {
  into.impl = from.impl;
  into.concurrency = from.concurrency;
  Append(into.publish, from.publish);
  Append(into.unpublish, from.unpublish);
  into.driver_cpu_s += from.driver_cpu_s;
  into.self_cpu_s += from.self_cpu_s;
}

// Publishes or unpublishes held volumes until `want` are published.
std::string HoldVolumes(CsiClient& client, const Batch& held, int& published,
                        int want) {
  const int from = std::min(published, want);
  const Phase phase = RunPhase(std::abs(want - published), 8, [&](int i) {
    const int v = from + i;
    return StatusError(
        want > published
            ? client.Publish(held.requests[v])
            : client.Unpublish(held.requests[v].volume_id(), held.targets[v]));
  });
  published = want;
  return phase.first_error;
}

// The machine is shared and noisy: the steps are visited in several rounds
// (filling up, then draining back to none), so noise falls on every step
// alike, and each step's latencies pool its rounds.
std::vector<ScalePoint> RunScale(CsiClient& client, pid_t driver_pid,
                                 const std::string& pods_dir,
                                 const std::string& cert, const Args& args,
                                 std::string* error) {
  const std::vector<int> steps = ScaleSteps(args.scale_volumes);
  std::vector<ScalePoint> points(steps.size());
  const Batch held = MakeBatch(pods_dir, "held", args.scale_volumes, args);
  const int sample = std::max(1, args.scale_sample / kScaleRounds);
  int published = 0;
  for (int round = 0; round < kScaleRounds; ++round) {
    for (size_t s = 0; s < steps.size(); ++s) {
      std::string problem = HoldVolumes(client, held, published, steps[s]);
      if (!problem.empty() && error->empty()) *error = problem;
      const std::string tag =
          "r" + std::to_string(round) + "s" + std::to_string(s);
      points[s].held = steps[s];
      Append(points[s].driver,
             RunDriver(client, driver_pid,
                       MakeBatch(pods_dir, tag + "d", sample, args), 1));
      Append(points[s].api,
             RunFloor(MakeBatch(pods_dir, tag + "a", sample, args), 1, cert,
                      "floor-api"));
      points[s].memory = ReadMemory(driver_pid);
    }
  }
  std::string problem = HoldVolumes(client, held, published, 0);
  if (!problem.empty() && error->empty()) *error = problem;
  return points;
}

// The driver's key cache counters: its Prometheus metrics when it serves
// them, else the derivations its log reports.
struct CacheCounts {
  long hits = -1;
  long misses = -1;
  std::string source;
};

long CountMatches(const std::string& text, const std::regex& re) {
  return std::distance(std::sregex_iterator(text.begin(), text.end(), re),
                       std::sregex_iterator());
}

CacheCounts KeyCacheFromLog(const std::string& log, long publishes) {
  CacheCounts c;
  static const std::regex kDerived("derived the key of MiniCluster");
  c.misses = CountMatches(log, kDerived);
  c.hits = publishes - c.misses;
  c.source = "driver log (derivations)";
  return c;
}

// True if the driver binary's serve has `flag` (older builds, compared
// against, lack some).
bool DriverHasFlag(const std::string& binary, std::string_view flag) {
  const std::string command = "'" + binary + "' serve --help 2>&1";
  FILE* help = popen(command.c_str(), "r");
  if (help == nullptr) return false;
  std::string text;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), help)) > 0;)
    text.append(buf, n);
  pclose(help);
  return text.find(flag) != std::string::npos;
}

CacheCounts KeyCacheFromMetrics(int port) {
  CacheCounts c;
  if (port == 0) return c;
  const std::string text = ScrapeMetrics(port);
  c.hits = MetricValue(text, "flux_curve_csi_key_cache_hits_total");
  c.misses = MetricValue(text, "flux_curve_csi_key_cache_misses_total");
  c.source = "driver's /metrics";
  return c;
}

void PrintPhaseRow(const std::string& impl, int concurrency, const char* op,
                   const Phase& p) {
  std::printf("%-9s %4d  %-10s %9zu %10.0f %9.0f %9.0f %9.0f %9.0f %6d\n",
              impl.c_str(), concurrency, op, p.latency_us.size(), p.PerSecond(),
              p.Mean(), p.Quantile(0.5), p.Quantile(0.99), p.Max(), p.errors);
}

// Adds r's errors to `errors` and names the first of each phase.
void CountErrors(const LevelResult& r, int& errors) {
  errors += r.publish.errors + r.unpublish.errors;
  if (r.publish.errors) {
    std::fprintf(stderr, "%s c=%d publish: %s\n", r.impl.c_str(), r.concurrency,
                 r.publish.first_error.c_str());
  }
  if (r.unpublish.errors) {
    std::fprintf(stderr, "%s c=%d unpublish: %s\n", r.impl.c_str(),
                 r.concurrency, r.unpublish.first_error.c_str());
  }
}

const char* Verdict(bool ok) { return ok ? "ok" : "MISSED"; }

// Issue 18's targets, each a ratio of figures measured in this run. The
// composite limit: two gRPC round trips (noop) plus the driver's own
// syscalls (floor-api), which no driver answering kubelet can go below.
void PrintTargets(const std::map<int, const LevelResult*>& driver_at,
                  const std::map<int, const LevelResult*>& api_at,
                  const std::map<int, Phase>& noop_at) {
  std::printf("\n%4s %14s %14s %14s %8s\n", "c", "noop ops/s", "floor-api p/s",
              "composite p/s", "driver/composite");
  std::map<int, double> ratio_at;
  for (const auto& [c, d] : driver_at) {
    if (!api_at.count(c) || !noop_at.count(c)) continue;
    const double noop = noop_at.at(c).PerSecond();
    const double api = api_at.at(c)->PairsPerSecond();
    const double composite = 1.0 / (2.0 / noop + 1.0 / api);
    ratio_at[c] = d->PairsPerSecond() / composite;
    std::printf("%4d %14.0f %14.0f %14.0f %8.2f\n", c, noop, api, composite,
                ratio_at[c]);
  }
  std::printf("\nTargets (issue 18; ratios within this run):\n");
  if (ratio_at.count(8)) {
    std::printf(
        "  pairs/s c=8 / composite limit              %6.2f  (>= 0.8)  %s\n",
        ratio_at[8], Verdict(ratio_at[8] >= 0.8));
  }
  if (driver_at.count(1) && api_at.count(1) && noop_at.count(1)) {
    const Phase& publish = driver_at.at(1)->publish;
    const double sum = noop_at.at(1).Mean() + api_at.at(1)->publish.Mean();
    const double mean = publish.Mean() / sum;
    const double p99 = publish.Quantile(0.99) / sum;
    std::printf(
        "  mean publish c=1 / (noop + floor-api) %.0f us %6.2f  (<= 1.25) %s\n",
        sum, mean, Verdict(mean <= 1.25));
    std::printf(
        "  p99 publish c=1 / the same sum              %6.2f  (<= 2)    %s\n",
        p99, Verdict(p99 <= 2));
  }
  if (driver_at.count(1) && driver_at.count(8)) {
    const auto cpu_per_pair = [](const LevelResult* r) {
      return r->driver_cpu_s / r->publish.latency_us.size();
    };
    const double ratio =
        cpu_per_pair(driver_at.at(1)) / cpu_per_pair(driver_at.at(8));
    std::printf(
        "  driver CPU per pair c=1 / c=8              %6.2f  (<= 1.3)  %s\n",
        ratio, Verdict(ratio <= 1.3));
  }
  if (driver_at.count(64)) {
    const Phase& p = driver_at.at(64)->publish;
    const Phase& u = driver_at.at(64)->unpublish;
    std::printf("  p99/mean c=64 publish, unpublish (issue 7)  %5.2f %5.2f\n",
                p.Quantile(0.99) / p.Mean(), u.Quantile(0.99) / u.Mean());
  }
}

// One level of the per-call mode: every driver call and no-op on a new
// connection; floor-api measured beside them.
struct PerCallLevel {
  LevelResult driver;
  LevelResult api;
  Phase noop;
};

PerCallLevel RunPerCall(CsiClient& per_call, pid_t driver_pid,
                        const std::string& pods_dir, const std::string& cert,
                        int threads, int n, const Args& args,
                        int metrics_port) {
  const std::string tag = "pc" + std::to_string(threads);
  PerCallLevel level;
  level.api = RunFloor(MakeBatch(pods_dir, "a" + tag, n, args), threads, cert,
                       "api-pc");
  level.driver =
      RunDriver(per_call, driver_pid, MakeBatch(pods_dir, "d" + tag, n, args),
                threads, metrics_port);
  level.driver.impl = "driver-pc";
  level.noop = RunNoop(per_call, n, threads);
  return level;
}

double DriverCpuPerPairUs(const LevelResult& r) {
  return r.driver_cpu_s / r.publish.latency_us.size() * 1e6;
}

// Issue 28's targets: what a new connection per call (kubelet's way) costs
// the driver against one kept connection, and a per-call publish against a
// per-call no-op plus the driver's syscalls.
void PrintPerCall(const std::map<int, PerCallLevel>& per_call_at,
                  const std::map<int, const LevelResult*>& driver_at) {
  if (per_call_at.empty()) return;
  std::printf(
      "\nA new connection per call, as kubelet dials (per-call mode):\n"
      "%4s %10s %10s %9s %9s %9s %9s %12s %12s\n",
      "c", "pairs/s", "noop/s", "pub mean", "pub p99", "noop mean", "api mean",
      "CPU/pair pc", "CPU/pair one");
  for (const auto& [c, l] : per_call_at) {
    const double shared =
        driver_at.count(c) ? DriverCpuPerPairUs(*driver_at.at(c)) : 0;
    std::printf("%4d %10.0f %10.0f %9.0f %9.0f %9.0f %9.0f %12.0f %12.0f\n", c,
                l.driver.PairsPerSecond(), l.noop.PerSecond(),
                l.driver.publish.Mean(), l.driver.publish.Quantile(0.99),
                l.noop.Mean(), l.api.publish.Mean(),
                DriverCpuPerPairUs(l.driver), shared);
  }
  std::printf("\nTargets (issue 28; ratios within this run):\n");
  for (const auto& [c, l] : per_call_at) {
    if (!driver_at.count(c)) continue;
    const double ratio =
        DriverCpuPerPairUs(l.driver) / DriverCpuPerPairUs(*driver_at.at(c));
    std::printf(
        "  driver CPU per pair c=%d, per-call / one connection  %5.2f  "
        "(<= 1.5)  %s\n",
        c, ratio, Verdict(ratio <= 1.5));
  }
  if (per_call_at.count(1)) {
    const PerCallLevel& l = per_call_at.at(1);
    const double sum = l.noop.Mean() + l.api.publish.Mean();
    const double mean = l.driver.publish.Mean() / sum;
    std::printf(
        "  mean publish c=1 / (per-call noop + floor-api) %.0f us %5.2f  "
        "(<= 1.2)  %s\n",
        sum, mean, Verdict(mean <= 1.2));
    std::printf("  p99 publish c=1 / the same sum                      %5.2f\n",
                l.driver.publish.Quantile(0.99) / sum);
  }
}

// The driver against the composite done serially (RunNoopThenApi): what is
// left of the distance to the composite limit is the driver's own.
void PrintSerial(const std::map<int, const LevelResult*>& driver_at,
                 const std::map<int, const LevelResult*>& serial_at) {
  std::printf(
      "\nAgainst a no-op RPC then the driver's syscalls, in series "
      "(noop+api):\n%4s %12s %12s %8s %12s %12s\n",
      "c", "driver p/s", "noop+api p/s", "ratio", "pub mean us", "n+a mean us");
  for (const auto& [c, d] : driver_at) {
    if (!serial_at.count(c)) continue;
    const LevelResult* n = serial_at.at(c);
    std::printf("%4d %12.0f %12.0f %8.2f %12.0f %12.0f\n", c,
                d->PairsPerSecond(), n->PairsPerSecond(),
                d->PairsPerSecond() / n->PairsPerSecond(), d->publish.Mean(),
                n->publish.Mean());
  }
}

// A driver call's mean split at its handler (the driver's own histogram):
// inside, the validation, key cache and mount work; outside, gRPC on both
// ends, the socket and, at c > 1, waiting for the driver's thread.
void PrintHandlerSplit(const std::map<int, const LevelResult*>& driver_at,
                       const std::map<int, const LevelResult*>& api_at,
                       const std::map<int, Phase>& noop_at) {
  std::printf(
      "\nInside and outside the driver's handler, mean us (its histogram):\n"
      "%4s %-10s %8s %8s %8s %10s %10s\n",
      "c", "op", "call", "handler", "outside", "noop", "floor-api");
  for (const auto& [c, d] : driver_at) {
    if (d->publish_handler_us < 0 || !api_at.count(c) || !noop_at.count(c)) {
      continue;
    }
    const LevelResult* a = api_at.at(c);
    const double noop = noop_at.at(c).Mean();
    for (const auto& [op, call, handler, api] :
         {std::tuple{"publish", d->publish.Mean(), d->publish_handler_us,
                     a->publish.Mean()},
          std::tuple{"unpublish", d->unpublish.Mean(), d->unpublish_handler_us,
                     a->unpublish.Mean()}}) {
      std::printf("%4d %-10s %8.0f %8.0f %8.0f %10.0f %10.0f\n", c, op, call,
                  handler, call - handler, noop, api);
    }
  }
}

void PrintScale(const std::vector<ScalePoint>& scale) {
  if (scale.empty()) return;
  std::printf(
      "\nScale (c=1, %zu fresh volumes per step, with the driver's volumes "
      "held):\n%6s %10s %10s %8s %8s %12s %12s %8s\n",
      scale.front().driver.publish.latency_us.size(), "held", "pub_p50",
      "unpub_p50", "pub/0", "unpub/0", "api_pub_p50", "api_unp_p50", "RSS_MiB");
  const double pub0 = scale.front().driver.publish.Quantile(0.5);
  const double unpub0 = scale.front().driver.unpublish.Quantile(0.5);
  for (const auto& point : scale) {
    const double pub = point.driver.publish.Quantile(0.5);
    const double unpub = point.driver.unpublish.Quantile(0.5);
    std::printf(
        "%6d %10.0f %10.0f %8.2f %8.2f %12.0f %12.0f %8.1f\n", point.held, pub,
        unpub, pub / pub0, unpub / unpub0, point.api.publish.Quantile(0.5),
        point.api.unpublish.Quantile(0.5), point.memory.rss_kib / 1024.0);
  }
  const ScalePoint& last = scale.back();
  const double pub = last.driver.publish.Quantile(0.5) / pub0;
  const double unpub = last.driver.unpublish.Quantile(0.5) / unpub0;
  std::printf(
      "  publish p50 at %d held / at 0                %6.2f  (<= 1.2)  %s\n",
      last.held, pub, Verdict(pub <= 1.2));
  std::printf(
      "  unpublish p50 at %d held / at 0              %6.2f  (<= 1.2)  %s\n",
      last.held, unpub, Verdict(unpub <= 1.2));
}

// One CSV row per call of r: impl,<key>,op,latency_us.
void WriteLatencyRows(std::ostream& csv, const LevelResult& r, int key) {
  for (const auto& [op, phase] : {std::pair{"publish", &r.publish},
                                  std::pair{"unpublish", &r.unpublish}}) {
    for (double v : phase->latency_us) {
      csv << r.impl << ',' << key << ',' << op << ',' << v << '\n';
    }
  }
}

void WriteScaleCsv(const std::string& path,
                   const std::vector<ScalePoint>& scale) {
  std::ofstream csv(path);
  csv << "impl,held,op,latency_us\n";
  for (const auto& point : scale) {
    WriteLatencyRows(csv, point.driver, point.held);
    WriteLatencyRows(csv, point.api, point.held);
  }
  std::printf("wrote %s\n", path.c_str());
}

std::vector<int> ParseInts(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoi(item));
  return out;
}

// A Secret volume's layout (kubelet's ..data) holding `key_file` as
// master.key, as the DaemonSet mounts the master key Secret. Returns the
// directory.
std::string SecretVolumeOf(const std::string& key_file) {
  fcc::testing::SecretVolume volume(
      std::filesystem::path(key_file).parent_path() / "master-keys");
  volume.Write({{"master.key", fcc::testing::ReadFileOrEmpty(key_file)}});
  return volume.dir();
}

int Usage() {
  std::fprintf(
      stderr,
      "usage: driver_bench [--csv FILE] [--concurrency 1,8,64]\n"
      "                    [--volumes 2000,3000,3000] [--memory-volumes 1000]\n"
      "                    [--per-call-concurrency 1,8]\n"
      "                    [--per-call-volumes 1000,2000]\n"
      "                    [--scale-volumes 5000] [--scale-sample 300]\n"
      "                    [--pods-per-minicluster 8] [--warmup 64]\n"
      "                    [--log-level info] [--driver BINARY]\n"
      "                    [--key-layout secret|file]\n"
      "Runs as root inside `unshare -m --propagation private` only.\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h" || i + 1 >= argc) return Usage();
    const std::string value = argv[++i];
    if (flag == "--csv") {
      args.csv = value;
    } else if (flag == "--concurrency") {
      args.concurrency = ParseInts(value);
    } else if (flag == "--volumes") {
      args.volumes = ParseInts(value);
    } else if (flag == "--per-call-concurrency") {
      args.per_call_concurrency = ParseInts(value);
    } else if (flag == "--per-call-volumes") {
      args.per_call_volumes = ParseInts(value);
    } else if (flag == "--memory-volumes") {
      args.memory_volumes = std::stoi(value);
    } else if (flag == "--scale-volumes") {
      args.scale_volumes = std::stoi(value);
    } else if (flag == "--scale-sample") {
      args.scale_sample = std::max(1, std::stoi(value));
    } else if (flag == "--pods-per-minicluster") {
      args.pods_per_minicluster = std::max(1, std::stoi(value));
    } else if (flag == "--warmup") {
      args.warmup = std::stoi(value);
    } else if (flag == "--driver") {
      args.driver = value;
    } else if (flag == "--log-level") {
      args.log_level = value;
    } else if (flag == "--key-layout" &&
               (value == "secret" || value == "file")) {
      args.key_layout = value;
    } else {
      return Usage();
    }
  }
  if (args.volumes.size() != args.concurrency.size()) {
    std::fprintf(stderr, "--volumes needs one count per --concurrency level\n");
    return 2;
  }
  if (args.per_call_volumes.size() != args.per_call_concurrency.size()) {
    std::fprintf(stderr,
                 "--per-call-volumes needs one count per "
                 "--per-call-concurrency level\n");
    return 2;
  }

  // Debian builds abseil without NDEBUG, so every absl::Mutex inside gRPC
  // runs deadlock detection: a global lock and a graph update per lock. The
  // client stands in for kubelet (Go, no absl) and shares the two cores with
  // the driver, so keep its cost down.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  // Mounting outside a private namespace would litter the host's table.
  if (const std::string problem = fcc::testing::MountEnvProblem();
      !problem.empty()) {
    std::fprintf(stderr, "driver_bench: %s\n", problem.c_str());
    return getenv("FCC_REQUIRE_MOUNT_TESTS") ? 1 : kExitSkip;
  }

  fcc::testing::ScratchRoot root;  // tmpfs: keys never reach a disk
  DriverProcess::Options options;
  options.binary = args.driver;
  options.socket_path = root.socket_path("bench");
  options.node_id = "bench";
  options.master_key_file =
      root.WriteMasterKey("master.key", std::string(64, 'b'));
  options.log_path = root.log_path("bench");
  options.log_level = args.log_level;
  // Metrics on as in the DaemonSet, on a free loopback port so runs in
  // parallel do not collide; they give the key cache counters.
  const bool metrics = DriverHasFlag(args.driver, "--metrics-address");
  if (metrics) options.extra_args.push_back("--metrics-address=127.0.0.1:0");
  // The bench holds thousands of volumes on its one node, far past the
  // DaemonSet's cap (one per pod, as in the DaemonSet, still holds).
  if (DriverHasFlag(args.driver, "--max-volumes-per-node")) {
    options.extra_args.push_back("--max-volumes-per-node=100000");
  }
  if (args.key_layout == "secret" &&
      DriverHasFlag(args.driver, "--master-key-dir")) {
    options.extra_args.push_back("--master-key-dir=" +
                                 SecretVolumeOf(options.master_key_file));
  }
  if (DriverHasFlag(args.driver, "--kubelet-dir")) {
    options.kubelet_dir = root.path();  // root.pods_dir() is <root>/pods
  }
  DriverProcess driver(options);
  if (!driver.Start(std::chrono::seconds(60))) {
    std::fprintf(stderr, "driver did not start:\n%s\n",
                 fcc::testing::ReadFileOrEmpty(options.log_path).c_str());
    return 1;
  }
  // Idle: started and answered Probe, nothing published yet.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const Memory idle = ReadMemory(driver.pid());
  CsiClient client(options.socket_path);
  const int metrics_port =
      MetricsPort(fcc::testing::ReadFileOrEmpty(options.log_path));

  std::printf("driver_bench: %u CPUs, load average ",
              std::thread::hardware_concurrency());
  {
    std::ifstream load("/proc/loadavg");
    std::string one, five, fifteen;
    load >> one >> five >> fifteen;
    std::printf("%s %s %s at start; driver log level %s\n", one.c_str(),
                five.c_str(), fifteen.c_str(), args.log_level.c_str());
  }

  // Warm-up: connection, server threads, page cache. Also gives the floor
  // the exact bytes the driver writes.
  long publishes = 0;
  std::string cert;
  {
    Batch warm =
        MakeBatch(root.pods_dir(), "warm", std::max(1, args.warmup), args);
    LevelResult r = RunDriver(client, driver.pid(), warm, 8);
    publishes += static_cast<long>(warm.requests.size());
    if (r.publish.errors || r.unpublish.errors) {
      std::fprintf(stderr, "warm-up failed: %s%s\n",
                   r.publish.first_error.c_str(),
                   r.unpublish.first_error.c_str());
      return 1;
    }
    if (!client.Publish(warm.requests[0]).ok()) return 1;
    ++publishes;
    cert = fcc::testing::ReadFileOrEmpty(warm.targets[0] + "/curve.cert");
    client.Unpublish(warm.requests[0].volume_id(), warm.targets[0]);
    if (cert.empty()) {
      std::fprintf(stderr, "could not read the published cert\n");
      return 1;
    }
  }

  // Floor and driver alternate per level so both see the same noise.
  std::vector<LevelResult> results;
  std::map<int, Phase> noop_at;
  for (size_t l = 0; l < args.concurrency.size(); ++l) {
    const int c = args.concurrency[l];
    const int n = args.volumes[l];
    const std::string tag = "c" + std::to_string(c);
    Batch floor_batch = MakeBatch(root.pods_dir(), "f" + tag, n, args);
    results.push_back(RunFloor(floor_batch, c, cert));
    Batch api_batch = MakeBatch(root.pods_dir(), "a" + tag, n, args);
    results.push_back(RunFloor(api_batch, c, cert, "floor-api"));
    Batch driver_batch = MakeBatch(root.pods_dir(), "d" + tag, n, args);
    results.push_back(
        RunDriver(client, driver.pid(), driver_batch, c, metrics_port));
    noop_at[c] = RunNoop(client, n, c);
    Batch serial_batch = MakeBatch(root.pods_dir(), "n" + tag, n, args);
    results.push_back(RunNoopThenApi(client, serial_batch, c, cert));
    publishes += n;
    std::filesystem::remove_all(root.pods_dir());
    std::filesystem::create_directories(root.pods_dir());
  }
  // kubelet's way: a new connection for every call.
  std::map<int, PerCallLevel> per_call_at;
  {
    CsiClient per_call(options.socket_path, CsiClient::Connection::kPerCall);
    for (size_t l = 0; l < args.per_call_concurrency.size(); ++l) {
      const int c = args.per_call_concurrency[l];
      const int n = args.per_call_volumes[l];
      per_call_at[c] = RunPerCall(per_call, driver.pid(), root.pods_dir(), cert,
                                  c, n, args, metrics_port);
      publishes += n;
      std::filesystem::remove_all(root.pods_dir());
      std::filesystem::create_directories(root.pods_dir());
    }
  }
  const Memory after_levels = ReadMemory(driver.pid());

  // Memory with volumes published (held, then released).
  Memory loaded;
  double load_errors = 0;
  {
    Batch batch = MakeBatch(root.pods_dir(), "mem", args.memory_volumes, args);
    const int n = args.memory_volumes;
    Phase pub = RunPhase(n, 8, [&](int i) {
      return StatusError(client.Publish(batch.requests[i]));
    });
    publishes += n;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    loaded = ReadMemory(driver.pid());
    Phase unpub = RunPhase(n, 8, [&](int i) {
      return StatusError(
          client.Unpublish(batch.requests[i].volume_id(), batch.targets[i]));
    });
    load_errors = pub.errors + unpub.errors;
  }
  std::string scale_error;
  const std::vector<ScalePoint> scale =
      RunScale(client, driver.pid(), root.pods_dir(), cert, args, &scale_error);
  publishes += static_cast<long>(kScaleRounds) * args.scale_volumes;
  for (const auto& point : scale) {
    publishes += static_cast<long>(point.driver.publish.latency_us.size());
  }
  const Memory end = ReadMemory(driver.pid());
  CacheCounts cache;
  if (metrics) cache = KeyCacheFromMetrics(metrics_port);

  if (driver.Terminate() != 0) {
    std::fprintf(stderr, "the driver did not stop cleanly\n");
  }
  const std::string log = fcc::testing::ReadFileOrEmpty(options.log_path);
  const CacheCounts from_log = KeyCacheFromLog(log, publishes);
  if (cache.hits < 0 || cache.misses < 0) cache = from_log;

  // ---- report ----
  std::printf("\n%-9s %4s  %-10s %9s %10s %9s %9s %9s %9s %6s\n", "impl", "c",
              "op", "n", "ops/s", "mean_us", "p50_us", "p99_us", "max_us",
              "errors");
  int errors = 0;
  for (const auto& r : results) {
    PrintPhaseRow(r.impl, r.concurrency, "publish", r.publish);
    PrintPhaseRow(r.impl, r.concurrency, "unpublish", r.unpublish);
    if (r.impl == "driver") {
      PrintPhaseRow("grpc", r.concurrency, "noop", noop_at[r.concurrency]);
    }
    CountErrors(r, errors);
  }
  for (const auto& [c, l] : per_call_at) {
    for (const LevelResult* r : {&l.api, &l.driver}) {
      PrintPhaseRow(r->impl, c, "publish", r->publish);
      PrintPhaseRow(r->impl, c, "unpublish", r->unpublish);
      CountErrors(*r, errors);
    }
    PrintPhaseRow("grpc-pc", c, "noop", l.noop);
    errors += l.noop.errors;
  }

  std::printf("\n%4s %14s %14s %8s   %s\n", "c", "driver pairs/s",
              "floor pairs/s", "ratio",
              "CPU us per pair: driver, its client, floor");
  std::map<int, const LevelResult*> driver_at, floor_at, api_at, serial_at;
  for (const auto& r : results) {
    (r.impl == "driver"      ? driver_at
     : r.impl == "floor-api" ? api_at
     : r.impl == "noop+api"  ? serial_at
                             : floor_at)[r.concurrency] = &r;
  }
  for (const auto& [c, d] : driver_at) {
    const LevelResult* f = floor_at[c];
    const double pairs = d->publish.latency_us.size();
    std::printf("%4d %14.0f %14.0f %8.2f   %6.0f %6.0f %6.0f\n", c,
                d->PairsPerSecond(), f->PairsPerSecond(),
                d->PairsPerSecond() / f->PairsPerSecond(),
                d->driver_cpu_s / pairs * 1e6, d->self_cpu_s / pairs * 1e6,
                f->self_cpu_s / f->publish.latency_us.size() * 1e6);
  }

  std::printf(
      "\nSecond floor, not a target: floor-api makes the driver's own "
      "syscalls\n(fsopen/fsconfig/fsmount/move_mount, statx before and after "
      "umount):\n");
  std::printf("%4s %14s %14s %8s   %s\n", "c", "driver pairs/s", "api pairs/s",
              "ratio", "CPU us per pair: floor-api");
  for (const auto& [c, d] : driver_at) {
    if (!api_at.count(c)) continue;
    const LevelResult* a = api_at[c];
    std::printf("%4d %14.0f %14.0f %8.2f   %6.0f\n", c, d->PairsPerSecond(),
                a->PairsPerSecond(), d->PairsPerSecond() / a->PairsPerSecond(),
                a->self_cpu_s / a->publish.latency_us.size() * 1e6);
  }
  if (driver_at.count(1) && api_at.count(1)) {
    const double api_op = api_at[1]->publish.Mean();
    std::printf("  p99 publish c=1 / floor-api publish time (%.0f us)  %6.2f\n",
                api_op, driver_at[1]->publish.Quantile(0.99) / api_op);
  }

  PrintTargets(driver_at, api_at, noop_at);
  PrintSerial(driver_at, serial_at);
  PrintHandlerSplit(driver_at, api_at, noop_at);
  PrintPerCall(per_call_at, driver_at);
  const auto mib = [](long kib) { return kib / 1024.0; };
  const auto print_memory = [&](const std::string& when, const Memory& m,
                                const std::string& target) {
    std::printf(
        "  %-26s VmRSS %5.1f  VmHWM %5.1f  (anon %5.1f, file %5.1f)  "
        "threads %2d  %s\n",
        when.c_str(), mib(m.rss_kib), mib(m.hwm_kib), mib(m.anon_kib),
        mib(m.file_kib), m.threads, target.c_str());
  };
  PrintScale(scale);
  if (!scale_error.empty()) {
    std::fprintf(stderr, "scale run: %s\n", scale_error.c_str());
  }
  std::printf("\nDriver memory, MiB (/proc/<pid>/status):\n");
  print_memory(
      "idle after start", idle,
      std::string("target <= 16: ") + Verdict(mib(idle.rss_kib) <= 16));
  print_memory(
      std::to_string(args.memory_volumes) + " volumes published", loaded,
      std::string("target <= 24: ") + Verdict(mib(loaded.rss_kib) <= 24));
  print_memory("after the c-levels", after_levels, "");
  if (!scale.empty()) {
    const Memory& at_max = scale.back().memory;
    print_memory(
        std::to_string(scale.back().held) + " volumes (scale run)", at_max,
        std::string("target <= 24: ") + Verdict(mib(at_max.rss_kib) <= 24));
  }
  print_memory("at the end (all released)", end, "");

  std::printf("\nKey cache (%d pods per MiniCluster, from the %s):\n",
              args.pods_per_minicluster, cache.source.c_str());
  const double expected = 1.0 - 1.0 / args.pods_per_minicluster;
  const long lookups = cache.hits + cache.misses;
  std::printf(
      "  %ld publishes, %ld lookups, %ld derivations (%ld logged), hit rate "
      "%.3f (expected %.3f)\n",
      publishes, lookups, cache.misses, from_log.misses,
      lookups ? double(cache.hits) / lookups : 0.0, expected);

  if (!args.csv.empty()) {
    std::ofstream csv(args.csv);
    csv << "impl,concurrency,op,latency_us\n";
    for (const auto& [c, p] : noop_at) {
      for (double v : p.latency_us)
        csv << "grpc," << c << ",noop," << v << '\n';
    }
    for (const auto& r : results) WriteLatencyRows(csv, r, r.concurrency);
    for (const auto& [c, l] : per_call_at) {
      for (double v : l.noop.latency_us) {
        csv << "grpc-pc," << c << ",noop," << v << '\n';
      }
      WriteLatencyRows(csv, l.api, c);
      WriteLatencyRows(csv, l.driver, c);
    }
    std::printf("\nwrote %s\n", args.csv.c_str());
    WriteScaleCsv(args.csv + ".scale.csv", scale);
  }
  return errors == 0 && load_errors == 0 && scale_error.empty() ? 0 : 1;
}
