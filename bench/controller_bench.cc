// controller_bench: how long the real minicluster-controller takes to handle
// N new MiniClusters on a real control plane (their Service, their Job, one
// status write each), against a floor measured in the same run: a plain
// client making exactly those writes - per MiniCluster its create, the
// Service, the Job and the status write, with the controller's own bodies
// (desired.h, plan.h) and libcurl KubeClient - at the controller's
// concurrency. Also the controller's memory and CPU, and where the API
// server's time and CPU went per request kind.
//
// Runs inside `scripts/controlplane run DIR -- ...` (KUBECONFIG and
// FCC_CP_DIR come from there). The machine is shared and noisy, so what
// matters is the ratio against the floor of the same run. It prints
// numbers; it is not a pass/fail test on time.
#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "controller/desired.h"
#include "controller/minicluster.h"
#include "controller/plan.h"
#include "controller/reconciler.h"
#include "controller/status.h"
#include "kube/api_path.h"
#include "kube/kube_client.h"
#include "kube/line_buffer.h"
#include "kube/time_format.h"
#include "kube/yaml_json.h"

namespace {

namespace ctl = fcc::controller;
namespace kube = fcc::kube;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Args {
  int count = 1000;
  int workers = 2;   // the controller's default --workers
  int spec_kib = 0;  // env entries added to every MiniCluster, KiB
  bool skip_floors = false;
  bool serial_floor = false;
  std::string controller = FCC_CONTROLLER_BINARY;
  std::string crd = FCC_CRD_FILE;
  std::string log_dir = "/tmp";
  int timeout_s = 900;
  bool apiserver_profile = false;
  // Where a phase's API server CPU profiles go; "" when not profiling.
  std::string profile_prefix(const std::string& phase) const {
    if (!apiserver_profile || phase.empty()) return "";
    return log_dir + "/apiserver-" + phase;
  }
};

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "controller_bench: %s\n", message.c_str());
  std::exit(1);
}

// ------------------------------------------------------------ /proc readings

struct ProcMemory {
  double rss_mib = 0, hwm_mib = 0, anon_mib = 0, file_mib = 0;
};

ProcMemory ReadMemory(pid_t pid) {
  ProcMemory m;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (in >> key) {
    double kib = 0;
    if (key == "VmRSS:" && in >> kib) m.rss_mib = kib / 1024;
    if (key == "VmHWM:" && in >> kib) m.hwm_mib = kib / 1024;
    if (key == "RssAnon:" && in >> kib) m.anon_mib = kib / 1024;
    if (key == "RssFile:" && in >> kib) m.file_mib = kib / 1024;
    in.ignore(1 << 20, '\n');
  }
  return m;
}

// utime + stime of `pid` in seconds; 0 when it is gone or pid is 0.
double CpuSeconds(pid_t pid) {
  if (pid <= 0) return 0;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), {});
  const auto paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream fields(stat.substr(paren + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
}

// The control plane's component pids, from scripts/controlplane's state.
std::map<std::string, pid_t> ControlPlanePids() {
  std::map<std::string, pid_t> pids;
  const char* dir = std::getenv("FCC_CP_DIR");
  if (dir == nullptr) return pids;
  std::ifstream in(std::string(dir) + "/state.json");
  json state = json::parse(in, nullptr, false);
  if (!state.is_object()) return pids;
  const json pid_by_component = state.value("pid", json::object());
  for (const auto& [comp, pid] : pid_by_component.items()) {
    if (pid.is_number_integer()) pids[comp] = pid.get<pid_t>();
  }
  return pids;
}

// CPU seconds of the controller and of each control-plane component.
struct CpuSnapshot {
  std::map<std::string, double> seconds;
  static CpuSnapshot Take(pid_t controller,
                          const std::map<std::string, pid_t>& plane) {
    CpuSnapshot s;
    if (controller > 0) s.seconds["controller"] = CpuSeconds(controller);
    for (const auto& [comp, pid] : plane) s.seconds[comp] = CpuSeconds(pid);
    return s;
  }
  double Delta(const CpuSnapshot& before, const std::string& name) const {
    auto now = seconds.find(name), then = before.seconds.find(name);
    if (now == seconds.end() || then == before.seconds.end()) return 0;
    return now->second - then->second;
  }
  std::string Since(const CpuSnapshot& before) const {
    std::string out;
    char buf[96];
    for (const auto& [name, s] : seconds) {
      auto it = before.seconds.find(name);
      std::snprintf(buf, sizeof buf, "%s%s %.1f", out.empty() ? "" : ", ",
                    name.c_str(),
                    s - (it == before.seconds.end() ? 0 : it->second));
      out += buf;
    }
    return out;
  }
};

// ------------------------------------------------------------ API helpers

void CheckOk(const kube::HttpResponse& r, const std::string& what,
             bool allow_conflict = false) {
  if (r.ok() || (allow_conflict && r.status == 409)) return;
  Die(what + ": " + r.Describe());
}

void InstallCrd(const kube::KubeClient& client, const std::string& crd_file) {
  std::ifstream in(crd_file);
  if (!in) Die("cannot read " + crd_file);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const auto crds = kube::YamlToJson(text);
  if (!crds) Die(crd_file + ": " + crds.error());
  for (const json& crd : *crds) {
    if (!crd.is_object()) continue;
    CheckOk(
        client.Request(
            "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            crd.dump()),
        "create CRD", /*allow_conflict=*/true);
  }
  const std::string path =
      "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
      "miniclusters.minicluster.dev";
  for (int i = 0; i < 300; ++i) {
    json crd = json::parse(client.Request("GET", path).body, nullptr, false);
    if (crd.is_object()) {
      for (const auto& c : crd.value("status", json::object())
                               .value("conditions", json::array())) {
        if (c.value("type", "") == "Established" &&
            c.value("status", "") == "True") {
          // The CRD's REST endpoint serves a moment after Established.
          for (int j = 0; j < 100; ++j) {
            if (client
                    .Request("GET",
                             kube::CollectionPath(ctl::kApiVersion,
                                                  ctl::kPlural, "default"))
                    .ok())
              return;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
          }
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  Die("the MiniCluster CRD did not become Established");
}

void CreateNamespace(const kube::KubeClient& client, const std::string& ns) {
  CheckOk(client.Request("POST", "/api/v1/namespaces",
                         json{{"apiVersion", "v1"},
                              {"kind", "Namespace"},
                              {"metadata", {{"name", ns}}}}
                             .dump()),
          "create namespace " + ns);
}

// Deletes `ns` and waits until it is gone, so its objects (and the garbage
// collector's work on them) cannot overlap the next phase.
double DeleteNamespaceAndWait(const kube::KubeClient& client,
                              const std::string& ns, int timeout_s) {
  const auto start = Clock::now();
  CheckOk(client.Request("DELETE", "/api/v1/namespaces/" + ns),
          "delete namespace " + ns);
  while (Clock::now() - start < std::chrono::seconds(timeout_s)) {
    auto r = client.Request("GET", "/api/v1/namespaces/" + ns);
    if (r.status == 404) return Seconds(Clock::now() - start);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  Die("namespace " + ns + " still there after " + std::to_string(timeout_s) +
      " s");
}

// One MiniCluster of the benchmark: queued (Kueue's queue-name label; no
// Kueue runs here), so its Job stays suspended and the Job controller of
// kube-controller-manager creates no pods, in both phases alike.
// `spec_kib` KiB of env entries make it as large as a tenant's may be.
json BenchMiniCluster(const std::string& ns, int i, int spec_kib) {
  char name[32];
  std::snprintf(name, sizeof name, "mc-%05d", i);
  json env = json::array();
  for (int k = 0; k < spec_kib; ++k) {
    env.push_back({{"name", "PAD_" + std::to_string(k)},
                   {"value", std::string(1000, 'x')}});
  }
  json mc{
      {"apiVersion", ctl::kApiVersion},
      {"kind", ctl::kKind},
      {"metadata",
       {{"name", name},
        {"namespace", ns},
        {"labels", {{ctl::kQueueNameLabel, "bench-queue"}}}}},
      {"spec",
       {{"size", 4},
        {"image", "fluxrm/flux-sched:bookworm"},
        {"command", {"flux", "run", "-N", "4", "hostname"}},
        {"fluxUser", {{"uid", 1000}, {"gid", 1000}}},
        {"resources", {{"requests", {{"cpu", "1"}, {"memory", "512Mi"}}}}}}}};
  if (!env.empty()) mc["spec"]["env"] = std::move(env);
  return mc;
}

// Runs `count` requests on `concurrency` threads, each taking the next
// index; returns the time from the first request to the last response.
double RunConcurrently(int count, int concurrency,
                       const std::function<void(int)>& request) {
  std::atomic<int> next{0};
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&] {
      for (int i = next++; i < count; i = next++) request(i);
    });
  }
  for (auto& t : threads) t.join();
  return Seconds(Clock::now() - start);
}

// Creates the MiniClusters of `ns`; returns the created objects (with the
// uid the controller puts in ownerReferences) and the time it took.
std::vector<json> CreateMiniClusters(const kube::KubeClient& client,
                                     const std::string& ns, int count,
                                     int spec_kib, int concurrency,
                                     double* seconds,
                                     Clock::time_point* first_request) {
  std::vector<json> created(count);
  const std::string path =
      kube::CollectionPath(ctl::kApiVersion, ctl::kPlural, ns);
  if (first_request) *first_request = Clock::now();
  *seconds = RunConcurrently(count, concurrency, [&](int i) {
    auto r =
        client.Request("POST", path, BenchMiniCluster(ns, i, spec_kib).dump());
    CheckOk(r, "create MiniCluster");
    created[i] = json::parse(r.body);
  });
  return created;
}

// ------------------------------------------------------------ API server
// metrics

// Requests the API server served, by "VERB resource[/subresource]": how
// many and the seconds they took (apiserver_request_duration_seconds).
struct RequestStats {
  double count = 0, seconds = 0;
};
using RequestTable = std::map<std::string, RequestStats>;

std::string LabelValue(const std::string& labels, const std::string& name) {
  const std::string key = name + "=\"";
  auto at = labels.find(key);
  if (at == std::string::npos) return "";
  at += key.size();
  return labels.substr(at, labels.find('"', at) - at);
}

RequestTable ScrapeRequests(const kube::KubeClient& client) {
  RequestTable table;
  auto r = client.Request("GET", "/metrics", "", "text/plain");
  if (!r.ok()) return table;
  std::istringstream lines(r.body);
  std::string line;
  const std::string metric = "apiserver_request_duration_seconds_";
  while (std::getline(lines, line)) {
    if (line.rfind(metric, 0) != 0) continue;
    const bool is_sum = line.compare(metric.size(), 4, "sum{") == 0;
    const bool is_count = line.compare(metric.size(), 6, "count{") == 0;
    if (!is_sum && !is_count) continue;
    const auto close = line.rfind('}');
    const std::string labels = line.substr(0, close);
    const std::string verb = LabelValue(labels, "verb");
    if (verb == "WATCH" || verb == "CONNECT") continue;  // long-running
    std::string key = verb + " " + LabelValue(labels, "resource");
    const std::string sub = LabelValue(labels, "subresource");
    if (!sub.empty()) key += "/" + sub;
    const double value = std::stod(line.substr(close + 1));
    (is_sum ? table[key].seconds : table[key].count) += value;
  }
  return table;
}

// The table of one phase; the CPU columns (when `apiserver_cpu_s` >= 0)
// apportion the API server's CPU
// seconds (from /proc) by each kind's share of the summed request time - an
// estimate: watch fan-out and background work have no request time and are
// spread over the kinds in proportion.
void PrintRequests(const char* title, const RequestTable& before,
                   const RequestTable& after, double apiserver_cpu_s) {
  std::vector<std::pair<std::string, RequestStats>> rows;
  double total_s = 0;
  for (const auto& [key, stats] : after) {
    RequestStats delta = stats;
    if (auto it = before.find(key); it != before.end()) {
      delta.count -= it->second.count;
      delta.seconds -= it->second.seconds;
    }
    if (delta.count < 1) continue;
    rows.emplace_back(key, delta);
    total_s += delta.seconds;
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return a.second.seconds > b.second.seconds;
  });
  const bool with_cpu = apiserver_cpu_s >= 0;
  std::printf("  %s\n  %-36s %7s %9s %9s %s\n", title, "request", "count",
              "mean ms", "total s", with_cpu ? " CPU s est. CPU ms/req" : "");
  for (const auto& [key, d] : rows) {
    std::printf("  %-36s %7.0f %9.2f %9.2f", key.c_str(), d.count,
                1000 * d.seconds / d.count, d.seconds);
    const double cpu = total_s > 0 ? apiserver_cpu_s * d.seconds / total_s : 0;
    if (with_cpu) std::printf(" %11.2f %9.2f", cpu, 1000 * cpu / d.count);
    std::printf("\n");
  }
  if (with_cpu) {
    std::printf("  %-36s %7s %9s %9.2f %11.2f\n", "all (kube-apiserver CPU)",
                "", "", total_s, apiserver_cpu_s);
  }
}

// Go CPU profiles of kube-apiserver (/debug/pprof/profile, on by default)
// for as long as it lives, in back-to-back 2 s pieces written to
// <prefix>-<n>.pb.gz (`go tool pprof` merges them). The last piece runs up
// to 2 s past Stop(). Does nothing when `prefix` is empty.
class ApiServerProfile {
 public:
  ApiServerProfile(const kube::KubeClient& client, std::string prefix)
      : client_(client), prefix_(std::move(prefix)) {
    if (prefix_.empty()) return;
    thread_ = std::thread([this] { Run(); });
  }
  ~ApiServerProfile() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    for (int n = 0; !stop_.load(); ++n) {
      const auto r = client_.Request("GET", "/debug/pprof/profile?seconds=2");
      if (!r.ok()) {
        std::fprintf(stderr, "controller_bench: profile: %s\n",
                     r.Describe().c_str());
        return;
      }
      std::ofstream(prefix_ + "-" + std::to_string(n) + ".pb.gz",
                    std::ios::binary)
          << r.body;
    }
  }

  const kube::KubeClient& client_;
  const std::string prefix_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
};

// ------------------------------------------------------------ observer

// Watches one collection of `ns` from `resource_version` and notes when the
// `count`-th event of `type` (ADDED, MODIFIED) arrived. Counts raw lines (no
// JSON parse) so the observer costs next to nothing.
class EventCounter {
 public:
  EventCounter(const kube::KubeClient& client, std::string collection,
               std::string resource_version, std::string type, int count)
      : client_(client),
        collection_(std::move(collection)),
        resource_version_(std::move(resource_version)),
        prefix_("{\"type\":\"" + type + "\""),
        count_(count) {}

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  // Waits until all were seen or the deadline passed; true if all were seen.
  bool Wait(Clock::time_point deadline) {
    while (!done_.load() && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    stop_ = true;
    thread_.join();
    return done_.load();
  }
  Clock::time_point done_at() const { return done_at_; }
  int seen() const { return seen_.load(); }

 private:
  void Run() {
    kube::LineBuffer lines;
    const std::string path = collection_ +
                             "?watch=1&resourceVersion=" + resource_version_ +
                             "&timeoutSeconds=3600";
    auto response = client_.Stream(
        path,
        [&](std::string_view data) {
          lines.Append(data);
          while (auto line = lines.NextLine()) {
            if (line->rfind(prefix_, 0) != 0) continue;
            if (++seen_ == count_) {
              done_at_ = Clock::now();
              done_ = true;
              return false;
            }
          }
          return true;
        },
        stop_, 60);
    if (!done_.load() && !stop_.load()) {
      // Never expected within a run; resuming would need the last
      // resourceVersion, so say so (the phase then times out).
      std::fprintf(stderr, "controller_bench: watch %s ended: %s\n",
                   collection_.c_str(), response.Describe().c_str());
    }
  }

  const kube::KubeClient& client_;
  const std::string collection_, resource_version_, prefix_;
  const int count_;
  std::thread thread_;
  std::atomic<bool> stop_{false}, done_{false};
  std::atomic<int> seen_{0};
  Clock::time_point done_at_;
};

std::string ListResourceVersion(const kube::KubeClient& client,
                                const std::string& collection) {
  auto r = client.Request("GET", collection + "?limit=1");
  CheckOk(r, "list " + collection);
  return json::parse(r.body)["metadata"].value("resourceVersion", "");
}

// The three observers every phase runs, from now on: ADDED Jobs and
// Services in `ns`, and MODIFIED MiniClusters (a MiniCluster changes only by
// its one status write here: nothing else writes to it).
struct PhaseWatches {
  PhaseWatches(const kube::KubeClient& client, const std::string& ns, int count)
      : jobs(Make(client, kube::CollectionPath("batch/v1", "jobs", ns), "ADDED",
                  count)),
        services(Make(client, kube::CollectionPath("v1", "services", ns),
                      "ADDED", count)),
        statuses(Make(client,
                      kube::CollectionPath(ctl::kApiVersion, ctl::kPlural, ns),
                      "MODIFIED", count)) {
    jobs.Start();
    services.Start();
    statuses.Start();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // open
  }
  // Waits for all three; the time the last of them completed, or nullopt.
  std::optional<Clock::time_point> Wait(Clock::time_point deadline) {
    const bool all =
        jobs.Wait(deadline) & services.Wait(deadline) & statuses.Wait(deadline);
    if (!all) return std::nullopt;
    return std::max({jobs.done_at(), services.done_at(), statuses.done_at()});
  }
  std::string Seen() const {
    return std::to_string(jobs.seen()) + " Jobs, " +
           std::to_string(services.seen()) + " Services, " +
           std::to_string(statuses.seen()) + " status writes";
  }

  EventCounter jobs, services, statuses;

 private:
  static EventCounter Make(const kube::KubeClient& client,
                           const std::string& collection,
                           const std::string& type, int count) {
    return EventCounter(client, collection,
                        ListResourceVersion(client, collection), type, count);
  }
};

struct FloorResult {
  std::string when;  // before or after the controller phase
  int concurrency = 0;
  double floor_s = 0;  // first request to last response
  double namespace_delete_s = 0;
  std::string cpu;
  double apiserver_cpu_s = 0;
  RequestTable requests_before, requests_after;
};

// What the controller writes for one new MiniCluster, sent by a plain
// client: the Service, the NetworkPolicy and the Job (POST, the
// controller's bodies and field manager) and the status (server-side apply of
// what PlanStatus computes from the created Job, as Reconciler::Execute does).
void WriteLikeTheController(kube::KubeClientApi& api, const json& minicluster,
                            const ctl::DesiredOptions& options) {
  auto parsed = ctl::ParseMiniCluster(minicluster);
  if (!parsed.ok()) Die("bench MiniCluster invalid: " + parsed.ErrorText());
  const ctl::MiniCluster& mc = *parsed.minicluster;
  const std::string& ns = mc.namespace_name;
  CheckOk(
      api.Create(kube::CollectionPath("v1", "services", ns),
                 ctl::DesiredService(mc, options), ctl::kCreateFieldManager),
      "floor: create Service");
  CheckOk(api.Create(kube::CollectionPath("networking.k8s.io/v1",
                                          "networkpolicies", ns),
                     ctl::DesiredNetworkPolicy(mc), ctl::kCreateFieldManager),
          "floor: create NetworkPolicy");
  const auto created =
      api.Create(kube::CollectionPath("batch/v1", "jobs", ns),
                 ctl::DesiredJob(mc, options), ctl::kCreateFieldManager);
  CheckOk(created, "floor: create Job");
  json job = json::parse(created.body);
  ctl::TrimJobForCache(job);
  const ctl::Observed observed{&minicluster, nullptr, &job, nullptr};
  const auto status = ctl::PlanStatus(
      observed, kube::FormatTime(std::chrono::system_clock::now()));
  if (!status) Die("floor: no status to write");
  CheckOk(api.Apply(status->path, status->body, status->field_manager,
                    status->force),
          "floor: apply status");
}

// The first requests on a new CRD's endpoint are slow (the API server builds
// its handlers, schema and field-manager state lazily); neither phase should
// pay for that, so a few MiniClusters go through the floor's writes in a
// namespace of their own first, which is then deleted.
void WarmUp(const kube::KubeClient& client, const Args& args) {
  const std::string ns = "bench-warmup";
  CreateNamespace(client, ns);
  kube::KubeClientApi api(client);
  const ctl::DesiredOptions options;
  const std::string path =
      kube::CollectionPath(ctl::kApiVersion, ctl::kPlural, ns);
  RunConcurrently(20, args.workers, [&](int i) {
    const auto r =
        client.Request("POST", path, BenchMiniCluster(ns, i, 0).dump());
    CheckOk(r, "warm-up: create MiniCluster");
    WriteLikeTheController(api, json::parse(r.body), options);
  });
  DeleteNamespaceAndWait(client, ns, args.timeout_s);
}

// The floor: per MiniCluster exactly the writes the design requires - the
// MiniCluster create, then what the controller writes for it (Service, Job,
// one status write) - by a plain client on `concurrency` threads, each
// taking the next MiniCluster. Timed first request to last response.
FloorResult RunFloor(const kube::KubeClient& client, const Args& args,
                     const std::string& ns, int concurrency,
                     const std::string& when) {
  FloorResult result;
  result.when = when;
  result.concurrency = concurrency;
  CreateNamespace(client, ns);
  kube::KubeClientApi api(client);
  const ctl::DesiredOptions options;
  const std::string path =
      kube::CollectionPath(ctl::kApiVersion, ctl::kPlural, ns);
  // The controller phase's observer watches run here too, so both phases
  // carry the same watchers besides the controller's own.
  PhaseWatches watches(client, ns, args.count);

  const auto plane = ControlPlanePids();
  const auto cpu_before = CpuSnapshot::Take(0, plane);
  // Profiled: the floor the per-kind tables show.
  const bool profiled = concurrency == args.workers && when == "before";
  ApiServerProfile profile(client,
                           args.profile_prefix(profiled ? "floor" : ""));
  result.requests_before = ScrapeRequests(client);
  result.floor_s = RunConcurrently(args.count, concurrency, [&](int i) {
    const auto r = client.Request(
        "POST", path, BenchMiniCluster(ns, i, args.spec_kib).dump());
    CheckOk(r, "floor: create MiniCluster");
    WriteLikeTheController(api, json::parse(r.body), options);
  });
  const auto cpu_after = CpuSnapshot::Take(0, plane);
  result.cpu = cpu_after.Since(cpu_before);
  result.apiserver_cpu_s = cpu_after.Delta(cpu_before, "kube-apiserver");
  result.requests_after = ScrapeRequests(client);
  profile.Stop();
  if (!watches.Wait(Clock::now() + std::chrono::seconds(args.timeout_s)))
    Die("floor: the observers saw only " + watches.Seen());
  result.namespace_delete_s =
      DeleteNamespaceAndWait(client, ns, args.timeout_s);
  return result;
}

// ------------------------------------------------------------ controller

// A port the kernel just handed out on loopback (closed again at once; the
// controller binds it a moment later).
int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    Die("cannot find a free loopback port");
  close(fd);
  return ntohs(addr.sin_port);
}

class ControllerProcess {
 public:
  ControllerProcess(const Args& args, const std::string& kubeconfig,
                    const std::string& lease_namespace,
                    const std::string& log_path)
      : log_path_(log_path) {
    health_port_ = FreeLoopbackPort();
    const std::vector<std::string> argv_strings = {
        args.controller, "run", "--kubeconfig=" + kubeconfig,
        "--workers=" + std::to_string(args.workers),
        "--health-addr=127.0.0.1:" + std::to_string(health_port_),
        // As deploy/controller/deployment.yaml runs it.
        "--leader-elect", "--leader-election-namespace=" + lease_namespace,
        "--log-format=json"};
    pid_ = fork();
    if (pid_ < 0) Die("fork failed");
    if (pid_ == 0) {
      int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      std::vector<char*> argv;
      for (const auto& s : argv_strings)
        argv.push_back(const_cast<char*>(s.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~ControllerProcess() { Stop(); }

  pid_t pid() const { return pid_; }

  // Polls /readyz (200 once every informer listed).
  bool WaitReady(int timeout_s) {
    CURL* curl = curl_easy_init();
    const std::string url =
        "http://127.0.0.1:" + std::to_string(health_port_) + "/readyz";
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 2L);
    const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
    bool ready = false;
    while (!ready && Clock::now() < deadline && Alive()) {
      long status = 0;
      if (curl_easy_perform(curl) == CURLE_OK)
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
      ready = status == 200;
      if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    curl_easy_cleanup(curl);
    return ready;
  }

  bool Alive() { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }

  // Waits until the controller's log did not grow for `quiet` (it logs
  // every write it makes, so it has nothing left to reconcile), at most
  // `limit`. Returns the time until its last write. (Its CPU time never
  // stays still: it renews its Lease every few seconds.)
  double WaitQuiet(std::chrono::milliseconds quiet,
                   std::chrono::seconds limit) {
    const auto start = Clock::now();
    auto size = [this] {
      std::error_code ec;
      return std::filesystem::file_size(log_path_, ec);
    };
    auto last = size();
    auto last_change = Clock::now();
    while (Clock::now() - start < limit) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const auto now = size();
      if (now != last) {
        last = now;
        last_change = Clock::now();
      } else if (Clock::now() - last_change >= quiet) {
        break;
      }
    }
    return Seconds(last_change - start);
  }

  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 200 && waitpid(pid_, nullptr, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (waitpid(pid_, nullptr, WNOHANG) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
  }

 private:
  const std::string log_path_;
  pid_t pid_ = -1;
  int health_port_ = 0;
};

void PrintMemory(const char* when, const ProcMemory& m) {
  std::printf("  %-44s %6.1f %6.1f %7.1f %7.1f\n", when, m.rss_mib, m.hwm_mib,
              m.anon_mib, m.file_mib);
}

void PrintControllerMemory(const Args& args, const ProcMemory& idle,
                           const ProcMemory& at_done, const ProcMemory& settled,
                           const ProcMemory& restarted) {
  std::printf(
      "\nController memory, MiB (/proc/<pid>/status), MiniClusters with %d "
      "KiB of env:\n",
      args.spec_kib);
  std::printf("  %-44s %6s %6s %7s %7s\n", "", "VmRSS", "VmHWM", "RssAnon",
              "RssFile");
  PrintMemory("idle, caches synced (empty)", idle);
  PrintMemory(("every write seen (" + std::to_string(args.count) + ")").c_str(),
              at_done);
  PrintMemory("quiet", settled);
  PrintMemory("restarted with all in place, quiet", restarted);
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"controller_bench: minicluster-controller vs a plain client"};
  app.add_option("--minicluster-count", args.count, "MiniClusters to create")
      ->check(CLI::Range(1, 100000));
  app.add_option("--workers", args.workers,
                 "the controller's --workers, and the floor's concurrency")
      ->check(CLI::Range(1, 64));
  app.add_option("--spec-kib", args.spec_kib,
                 "KiB of env entries in every MiniCluster (a large spec)")
      ->check(CLI::Range(0, 1400));
  app.add_flag("--skip-floors", args.skip_floors,
               "measure the controller alone (memory with large specs)");
  app.add_flag("--serial-floor", args.serial_floor,
               "also measure the floor at concurrency 1 (reference)");
  app.add_option("--controller", args.controller,
                 "minicluster-controller binary");
  app.add_option("--crd", args.crd, "the MiniCluster CRD manifest");
  app.add_option("--log-dir", args.log_dir, "where the controller's log goes");
  app.add_option("--timeout", args.timeout_s, "give up a phase after (s)");
  app.add_flag("--apiserver-profile", args.apiserver_profile,
               "write kube-apiserver CPU profiles of each phase to --log-dir "
               "(apiserver-<phase>-<n>.pb.gz)");
  std::string kube_controllers = "(default list)";
  app.add_option("--kube-controllers", kube_controllers,
                 "what kube-controller-manager runs (printed only)");
  CLI11_PARSE(app, argc, argv);

  const char* kubeconfig = std::getenv("KUBECONFIG");
  if (kubeconfig == nullptr)
    Die("KUBECONFIG unset; run under `scripts/controlplane run DIR -- ...`");
  auto config = kube::LoadKubeconfig(kubeconfig);
  if (!config) Die(config.error());
  const kube::KubeClient client(std::move(*config));
  const auto plane = ControlPlanePids();

  std::printf(
      "controller_bench: %ld CPUs, load average %s at start; %d "
      "MiniClusters, %d workers\nkube-controller-manager controllers: %s\n",
      sysconf(_SC_NPROCESSORS_ONLN), LoadAverage().c_str(), args.count,
      args.workers, kube_controllers.c_str());
  std::fflush(stdout);
  InstallCrd(client, args.crd);
  WarmUp(client, args);

  // Floor first, on an API server that has not seen the controller yet.
  std::vector<FloorResult> floors;
  if (!args.skip_floors) {
    floors.push_back(
        RunFloor(client, args, "bench-floor", args.workers, "before"));
    // For reference: as many requests in flight as the controller phase has
    // at most (the bench's creating threads and the controller's workers).
    floors.push_back(
        RunFloor(client, args, "bench-floor-wide", 2 * args.workers, "before"));
    if (args.serial_floor && args.workers != 1)
      floors.push_back(
          RunFloor(client, args, "bench-floor-serial", 1, "before"));
  }

  // The controller phase.
  const std::string ns = "bench-controller";
  CreateNamespace(client, ns);
  const std::string log_path =
      args.log_dir + "/controller_bench-controller.log";
  std::remove(log_path.c_str());
  auto controller =
      std::make_unique<ControllerProcess>(args, kubeconfig, ns, log_path);
  const auto start_at = Clock::now();
  if (!controller->WaitReady(120))
    Die("the controller did not become ready; log: " + log_path);
  const double ready_s = Seconds(Clock::now() - start_at);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const ProcMemory idle = ReadMemory(controller->pid());

  PhaseWatches watches(client, ns, args.count);

  const auto cpu_before = CpuSnapshot::Take(controller->pid(), plane);
  const RequestTable requests_before = ScrapeRequests(client);
  ApiServerProfile profile(client, args.profile_prefix("controller"));
  Clock::time_point first_create;
  double mc_create_s = 0;
  CreateMiniClusters(client, ns, args.count, args.spec_kib, args.workers,
                     &mc_create_s, &first_create);
  const auto done_at =
      watches.Wait(Clock::now() + std::chrono::seconds(args.timeout_s));
  if (!done_at) {
    Die("timed out: saw " + watches.Seen() + " of " +
        std::to_string(args.count) + "; log: " + log_path);
  }
  const double controller_s = Seconds(*done_at - first_create);
  const ProcMemory at_done = ReadMemory(controller->pid());
  const auto cpu_done = CpuSnapshot::Take(controller->pid(), plane);
  const RequestTable requests_done = ScrapeRequests(client);
  profile.Stop();
  const std::string cpu_until_done = cpu_done.Since(cpu_before);
  // Then whatever the controller still does (re-reconciles the events of
  // its own writes cause).
  const double settle_s =
      controller->WaitQuiet(std::chrono::seconds(3), std::chrono::seconds(300));
  const ProcMemory settled = ReadMemory(controller->pid());
  const RequestTable requests_quiet = ScrapeRequests(client);
  const auto cpu_quiet = CpuSnapshot::Take(controller->pid(), plane);
  const std::string cpu_until_quiet = cpu_quiet.Since(cpu_before);
  const double controller_cpu_s =
      CpuSeconds(controller->pid()) - cpu_before.seconds.at("controller");

  // A restart with everything in place: the full list into the caches and
  // one no-op reconcile of every MiniCluster (what a resync does).
  controller.reset();
  controller =
      std::make_unique<ControllerProcess>(args, kubeconfig, ns, log_path);
  const auto restart_at = Clock::now();
  if (!controller->WaitReady(120))
    Die("the restarted controller did not become ready; log: " + log_path);
  const double restart_ready_s = Seconds(Clock::now() - restart_at);
  const double cpu_at_restart_ready = CpuSeconds(controller->pid());
  controller->WaitQuiet(std::chrono::seconds(3), std::chrono::seconds(300));
  const ProcMemory restarted = ReadMemory(controller->pid());
  const double restart_cpu_s = CpuSeconds(controller->pid());
  controller.reset();

  // The floor again: the machine is shared, and its load drifts over the
  // minutes of a run; the target uses the mean of the floors before and
  // after the controller phase.
  if (args.skip_floors) {
    std::printf(
        "\nController alone: first create to every write seen %.2f s, CPU "
        "%.2f s; restart with %d in place ready in %.2f s\n",
        controller_s, controller_cpu_s, args.count, restart_ready_s);
    PrintControllerMemory(args, idle, at_done, settled, restarted);
    return 0;
  }
  floors.push_back(
      RunFloor(client, args, "bench-floor-after", args.workers, "after"));
  const FloorResult& floor_after = floors.back();

  // ---------------------------------------------------------------- report
  const int n = args.count;
  std::printf(
      "\nFloor: per MiniCluster its create, then the Service, the "
      "NetworkPolicy, the Job (POST) "
      "and one status write (apply), as the controller makes them, by a "
      "plain client (the same kube::KubeClient)\n");
  std::printf("  %-7s %4s %10s %16s %12s  %s\n", "when", "c", "floor s",
              "MiniClusters/s", "(ns delete s)", "CPU s during the floor");
  for (const auto& f : floors) {
    std::printf("  %-7s %4d %10.2f %16.0f %12.1f  %s\n", f.when.c_str(),
                f.concurrency, f.floor_s, n / f.floor_s, f.namespace_delete_s,
                f.cpu.c_str());
  }

  const double floor_s = (floors[0].floor_s + floor_after.floor_s) / 2;
  const double floor_apiserver_cpu_s =
      (floors[0].apiserver_cpu_s + floor_after.apiserver_cpu_s) / 2;
  std::printf(
      "\nController (--workers %d): %d MiniClusters created at c=%d by the "
      "bench\n",
      args.workers, n, args.workers);
  std::printf("  start to ready (caches synced)          %8.2f s\n", ready_s);
  std::printf("  MiniCluster creates alone               %8.2f s\n",
              mc_create_s);
  std::printf(
      "  first create to every Job, Service, status %5.2f s  (%.0f "
      "MiniClusters/s)\n",
      controller_s, n / controller_s);
  std::printf("  then quiet (no more writes) after       %8.2f s more\n",
              settle_s);
  std::printf(
      "  controller CPU                          %8.2f s  (%.2f ms per "
      "MiniCluster)\n",
      controller_cpu_s, 1000 * controller_cpu_s / n);
  std::printf("  CPU s until every write was seen: %s\n",
              cpu_until_done.c_str());
  std::printf("  CPU s until the controller was quiet: %s\n",
              cpu_until_quiet.c_str());
  std::printf(
      "  restart with %d in place: ready %.2f s, CPU %.2f s to ready, "
      "%.2f s in all\n",
      n, restart_ready_s, cpu_at_restart_ready, restart_cpu_s);

  std::printf(
      "\nWhere the API server's time went (apiserver_request_duration_seconds; "
      "includes the scrapes, excludes watches; CPU apportioned by request "
      "time, an estimate):\n");
  PrintRequests("floor (c=workers), first request to last response:",
                floors[0].requests_before, floors[0].requests_after,
                floors[0].apiserver_cpu_s);
  PrintRequests(
      "controller phase, first MiniCluster create until every write "
      "was seen:",
      requests_before, requests_done,
      cpu_done.Delta(cpu_before, "kube-apiserver"));
  PrintRequests("controller phase, after that until quiet:", requests_done,
                requests_quiet, -1);

  PrintControllerMemory(args, idle, at_done, settled, restarted);

  const double ratio = controller_s / floor_s;
  const double worst_rss =
      std::max({at_done.hwm_mib, settled.hwm_mib, restarted.hwm_mib});
  auto verdict = [](bool ok) { return ok ? "ok" : "MISSED"; };
  std::printf(
      "\nTargets (ratios against the floor of this run, c=%d: the mean of "
      "%.2f s before and %.2f s after the controller phase):\n",
      args.workers, floors[0].floor_s, floor_after.floor_s);
  std::printf(
      "  controller / floor (MC+Service+Job+status)  %5.2f  (target <= 1.3)  "
      "%s\n",
      ratio, verdict(ratio <= 1.3));
  std::printf(
      "  controller / floor at c=%d (as many in flight) %5.2f  (reference)\n",
      floors[1].concurrency, controller_s / floors[1].floor_s);
  std::printf(
      "  kube-apiserver CPU, controller phase / floor %5.2f  (reference)\n",
      cpu_done.Delta(cpu_before, "kube-apiserver") / floor_apiserver_cpu_s);
  std::printf(
      "  controller peak RSS (VmHWM) at %d         %6.1f MiB (target <= 48) "
      "%s\n",
      n, worst_rss, verdict(worst_rss <= 48.0));
  std::printf("load average at end: %s\n", LoadAverage().c_str());
  return 0;
}
