// minicluster-controller: `run` (default) reconciles MiniClusters;
// `render -f FILE` prints the Service and Job for a MiniCluster manifest.
#include <pthread.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "health.h"
#include "kube_client.h"
#include "leader_election.h"
#include "reconciler.h"
#include "render.h"
#include "stop_signal.h"
#include "watch.h"
#include "work_queue.h"

namespace fcc::controller {
namespace {

using nlohmann::json;

struct RunFlags {
  std::string kubeconfig;
  std::string context;
  std::string watch_namespace;
  bool leader_elect = false;
  std::string leader_election_namespace;
  std::string leader_election_id = "minicluster-controller";
  std::string health_address = ":8081";
  int workers = 2;
  int resync_minutes = 10;
  std::string kueue_workload_api = "kueue.x-k8s.io/v1beta1";
  int watch_timeout_s = 300;
};

// One JSON object per line: {"ts", "level", "msg"}.
class JsonLogFormatter : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg,
              spdlog::memory_buf_t& dest) override {
    const auto level = spdlog::level::to_string_view(msg.level);
    const std::string line =
        json{{"ts", FormatMicroTime(msg.time)},
             {"level", std::string(level.data(), level.size())},
             {"msg", std::string(msg.payload.data(), msg.payload.size())}}
            .dump(-1, ' ', false, json::error_handler_t::replace) +
        "\n";
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonLogFormatter>();
  }
};

void SetUpLogging(const std::string& format, const std::string& level) {
  auto logger = spdlog::stderr_logger_mt("minicluster-controller");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(level));
  if (format == "json") {
    spdlog::set_formatter(std::make_unique<JsonLogFormatter>());
  } else {
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %^%l%$ %v",
                        spdlog::pattern_time_type::utc);
  }
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

std::string ReplicaIdentity() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::mt19937_64 rng{std::random_device{}()};
  char suffix[17];
  std::snprintf(suffix, sizeof suffix, "%016llx",
                static_cast<unsigned long long>(rng()));
  return std::string(host) + "_" + suffix;
}

std::string NamespaceOf(const json& object) {
  return object.value("metadata", json::object()).value("namespace", "");
}

int Run(const RunFlags& flags, const DesiredOptions& desired_options) {
  // SIGTERM/SIGINT are taken by one thread with sigwait; every other thread
  // inherits the blocked mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  KubeConfig config;
  try {
    config = flags.kubeconfig.empty()
                 ? InClusterConfig()
                 : LoadKubeconfig(flags.kubeconfig, flags.context);
  } catch (const std::exception& e) {
    spdlog::critical("{}", e.what());
    return 2;
  }
  spdlog::info("minicluster-controller {} talking to {}", FCC_VERSION,
               config.server);
  KubeClient client(config);
  KubeClientApi api(client);

  StopSignal stop;
  WorkQueue queue;
  ObjectStore miniclusters, services, jobs, workloads;

  auto enqueue_owner = [&](const json& object, const char* kind) {
    const std::string owner = ControllerOwnerName(object, kind);
    if (!owner.empty()) queue.Add(NamespaceOf(object) + "/" + owner);
  };
  const std::string ns = flags.watch_namespace;
  const std::string ours = kNameLabel;  // label-existence selector
  auto options = [&](std::string name, std::string path, std::string selector) {
    Informer::Options o;
    o.name = std::move(name);
    o.collection_path = std::move(path);
    o.label_selector = std::move(selector);
    o.watch_timeout_s = flags.watch_timeout_s;
    return o;
  };
  Informer mc_informer(
      client,
      options("miniclusters", CollectionPath(kApiVersion, kPlural, ns), ""),
      miniclusters,
      [&](WatchEvent::Type, const json& o) { queue.Add(ObjectKey(o)); });
  Informer svc_informer(
      client, options("services", CollectionPath("v1", "services", ns), ours),
      services,
      [&](WatchEvent::Type, const json& o) { enqueue_owner(o, kKind); });
  Informer::Options job_options =
      options("jobs", CollectionPath("batch/v1", "jobs", ns), ours);
  job_options.trim = TrimJobForCache;
  Informer job_informer(
      client, job_options, jobs,
      [&](WatchEvent::Type, const json& o) { enqueue_owner(o, kKind); });
  Informer::Options wl_options =
      options("kueue workloads",
              CollectionPath(flags.kueue_workload_api, "workloads", ns), "");
  wl_options.optional = true;  // Kueue is optional
  Informer wl_informer(client, wl_options, workloads,
                       [&](WatchEvent::Type, const json& o) {
                         // A Workload is owned by the Job, which has the
                         // MiniCluster's name.
                         const std::string job = ControllerOwnerName(o, "Job");
                         const std::string key = NamespaceOf(o) + "/" + job;
                         if (!job.empty() && miniclusters.Get(key))
                           queue.Add(key);
                       });

  auto caches_synced = [&] {
    return mc_informer.HasSynced() && svc_informer.HasSynced() &&
           job_informer.HasSynced() && wl_informer.HasSynced();
  };

  std::string health_host;
  int health_port = 0;
  if (!ParseListenAddress(flags.health_address, &health_host, &health_port)) {
    spdlog::critical("--health-addr: expected [host]:port, got \"{}\"",
                     flags.health_address);
    return 2;
  }
  HealthServer health(health_host, health_port, caches_synced);
  if (!health.Start()) return 2;

  int exit_code = 0;
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (!stop.stopped()) spdlog::info("received signal {}, shutting down", sig);
    stop.Stop();
    queue.ShutDown();
  });

  std::vector<std::thread> threads;
  for (Informer* informer :
       {&mc_informer, &svc_informer, &job_informer, &wl_informer}) {
    threads.emplace_back([informer, &stop] { informer->Run(stop); });
  }

  std::optional<LeaderElector> elector;
  if (flags.leader_elect) {
    LeaderElectionOptions le;
    le.namespace_ = flags.leader_election_namespace.empty()
                        ? config.namespace_
                        : flags.leader_election_namespace;
    le.name = flags.leader_election_id;
    le.identity = ReplicaIdentity();
    if (le.namespace_.empty()) {
      spdlog::critical(
          "--leader-elect needs --leader-election-namespace outside a cluster");
      stop.Stop();
      queue.ShutDown();
      exit_code = 2;
    } else {
      elector.emplace(client, le);
      if (elector->Acquire(stop)) {
        threads.emplace_back([&] {
          if (!elector->KeepRenewing(stop)) {
            exit_code = 1;  // another replica may act now: stop at once
            stop.Stop();
            queue.ShutDown();
          }
        });
      }
    }
  }

  // Reconcile only from complete caches: a partial cache would look like
  // missing Jobs and cause duplicate creates.
  while (!stop.stopped() && !caches_synced())
    stop.WaitFor(std::chrono::milliseconds(100));
  if (!stop.stopped())
    spdlog::info("caches synced; starting {} workers", flags.workers);

  Reconciler reconciler({miniclusters, services, jobs, workloads}, api,
                        desired_options);
  for (int i = 0; i < flags.workers && !stop.stopped(); ++i) {
    threads.emplace_back([&] {
      while (auto key = queue.Get()) {
        if (reconciler.Reconcile(*key)) {
          queue.Forget(*key);
        } else {
          const auto delay = queue.AddRateLimited(*key);
          spdlog::info("minicluster {}: retrying in {} ms", *key,
                       delay.count());
        }
        queue.Done(*key);
      }
    });
  }
  // Level-triggered safety net: revisit everything now and then.
  threads.emplace_back([&] {
    while (!stop.WaitFor(std::chrono::minutes(flags.resync_minutes))) {
      for (const auto& key : miniclusters.Keys()) queue.Add(key);
    }
  });

  for (auto& t : threads) t.join();
  if (elector && exit_code == 0) elector->Release();
  health.Stop();
  // The signal thread still waits when we stop for another reason.
  pthread_kill(signal_thread.native_handle(), SIGTERM);
  signal_thread.join();
  spdlog::info("stopped");
  return exit_code;
}

}  // namespace
}  // namespace fcc::controller

int main(int argc, char** argv) {
  using namespace fcc::controller;
  CLI::App app{
      "minicluster-controller: runs Flux MiniClusters as suspended Indexed "
      "Jobs"};
  app.set_version_flag("--version", FCC_VERSION);
  std::string log_format = "text";
  std::string log_level = "info";
  DesiredOptions desired;
  RunFlags flags;
  auto* run = app.add_subcommand("run", "reconcile MiniClusters (the default)");
  for (CLI::App* cmd : {static_cast<CLI::App*>(&app), run}) {
    // Also after "run": the Deployment passes `run --log-format=json`.
    cmd->add_option("--log-format", log_format, "text or json")
        ->check(CLI::IsMember({"text", "json"}));
    cmd->add_option("--log-level", log_level, "trace, debug, info, warn, error")
        ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
    cmd->add_option("--cluster-domain", desired.cluster_domain,
                    "cluster DNS domain brokers use to reach each other");
    // Accepted before or after "run", so the default subcommand can be omitted.
    cmd->add_option(
        "--kubeconfig", flags.kubeconfig,
        "kubeconfig to use outside a cluster (default: in-cluster config)");
    cmd->add_option("--context", flags.context, "kubeconfig context");
    cmd->add_option("--namespace", flags.watch_namespace,
                    "watch only this namespace (default: all)");
    cmd->add_flag("--leader-elect", flags.leader_elect,
                  "elect a leader through a Lease so only one replica acts");
    cmd->add_option("--leader-election-namespace",
                    flags.leader_election_namespace,
                    "namespace of the Lease (default: the pod's namespace)");
    cmd->add_option("--leader-election-id", flags.leader_election_id,
                    "name of the Lease");
    cmd->add_option("--health-addr", flags.health_address,
                    "address of /healthz and /readyz");
    cmd->add_option("--workers", flags.workers, "concurrent reconciles")
        ->check(CLI::Range(1, 64));
    cmd->add_option("--resync-minutes", flags.resync_minutes,
                    "revisit every MiniCluster this often")
        ->check(CLI::Range(1, 1440));
    cmd->add_option("--kueue-workload-api", flags.kueue_workload_api,
                    "apiVersion of Kueue's Workload");
    // Short values let tests see watches closed by the server and resumed.
    cmd->add_option("--watch-timeout-seconds", flags.watch_timeout_s,
                    "ask the API server to end each watch after this long")
        ->check(CLI::Range(1, 3600));
  }

  std::string render_file;
  auto* render = app.add_subcommand(
      "render", "print the Service and Job for a MiniCluster");
  render
      ->add_option("-f,--filename", render_file,
                   "MiniCluster manifest (YAML or JSON)")
      ->required();

  CLI11_PARSE(app, argc, argv);
  SetUpLogging(log_format, log_level);

  if (*render) {
    try {
      std::cout << RenderMiniCluster(ReadWholeFile(render_file), desired);
    } catch (const std::exception& e) {
      std::cerr << "render " << render_file << ": " << e.what() << "\n";
      return 1;
    }
    return 0;
  }
  return Run(flags, desired);
}
