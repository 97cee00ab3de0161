// minicluster-controller: `run` (default) reconciles MiniClusters;
// `render -f FILE` prints the Service, NetworkPolicy and Job for a MiniCluster
// manifest.
// This file parses flags and wires the parts together; controller.h runs
// them.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <array>
#include <expected>
#include <iostream>
#include <optional>

#include "common/file.h"
#include "common/http_server.h"
#include "common/logging.h"
#include "common/signals.h"
#include "common/stop_signal.h"
#include "controller/controller.h"
#include "controller/events.h"
#include "controller/metrics.h"
#include "controller/reconciler.h"
#include "controller/render.h"
#include "controller/watches.h"
#include "kube/kube_client.h"
#include "kube/leader_election.h"
#include "kube/work_queue.h"

namespace fcc::controller {
namespace {

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
  std::string workload_label_selector;
};

std::expected<kube::KubeConfig, std::string> LoadConfig(const RunFlags& flags) {
  auto config = flags.kubeconfig.empty()
                    ? kube::InClusterConfig()
                    : kube::LoadKubeconfig(flags.kubeconfig, flags.context);
  if (config) config->user_agent = "minicluster-controller/" FCC_VERSION;
  return config;
}

// Events' reportingInstance: the pod's name in a cluster.
std::string HostName() {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) return "unknown";
  return host.data();
}

// nullopt without --leader-elect; an error when the Lease has no namespace.
std::expected<std::optional<kube::LeaderElectionOptions>, std::string>
ElectionOptions(const RunFlags& flags, const kube::KubeConfig& config) {
  if (!flags.leader_elect) return std::nullopt;
  kube::LeaderElectionOptions le;
  le.namespace_name = flags.leader_election_namespace.empty()
                          ? config.namespace_name
                          : flags.leader_election_namespace;
  le.name = flags.leader_election_id;
  le.identity = kube::ReplicaIdentity();
  if (le.namespace_name.empty()) {
    return std::unexpected(
        "--leader-elect needs --leader-election-namespace outside a cluster");
  }
  return le;
}

// /healthz: the process serves; /readyz: the caches are synced; /metrics:
// Prometheus (one port for probes and scrapes, as the driver's).
std::expected<std::unique_ptr<common::HttpServer>, std::string> StartHealth(
    const std::string& address, const Watches& watches, Metrics& metrics) {
  auto ok = [] { return common::HttpReply{200, "ok\n"}; };
  auto ready = [&watches] {
    return watches.HasSynced() ? common::HttpReply{200, "ok\n"}
                               : common::HttpReply{503, "caches not synced\n"};
  };
  auto scrape = [&metrics] {
    return common::HttpReply{200, metrics.Render(),
                             "text/plain; version=0.0.4"};
  };
  auto server = common::HttpServer::Start(
      "--health-addr", address,
      {{"/healthz", ok}, {"/readyz", ready}, {"/metrics", scrape}});
  if (server) {
    spdlog::info("health: serving /healthz, /readyz and /metrics on {}",
                 address);
  }
  return server;
}

// Runs the controller until a signal (0) or a lost lease (1).
int RunReconciling(const RunFlags& flags, const DesiredOptions& desired,
                   kube::KubeClient& client,
                   const std::optional<kube::LeaderElectionOptions>& election,
                   common::StopSignal& stop) {
  kube::WorkQueue queue;
  Metrics metrics(&queue, client.config().server, flags.workers);
  queue.set_observer(&metrics);
  client.set_observer(&metrics);
  Watches watches(client,
                  {flags.watch_namespace, flags.kueue_workload_api,
                   flags.watch_timeout_s, flags.workload_label_selector});
  auto health = StartHealth(flags.health_address, watches, metrics);
  if (!health) {
    spdlog::critical("{}", health.error());
    return 2;
  }
  kube::KubeClientApi api(client);
  KubeEventRecorder event_sender(api, HostName());
  // Events go out on a thread of their own: a worker's next reconcile does
  // not wait for the previous one's Event.
  AsyncEventRecorder events(event_sender);
  Reconciler reconciler(watches.caches(), api, desired, &events);
  Controller controller(
      {flags.workers, std::chrono::minutes(flags.resync_minutes)}, watches,
      queue, reconciler, &metrics);
  // The caches fill while a standby waits for the lease.
  watches.Start(stop);
  int exit_code = 0;
  if (election) {
    kube::LeaderElector elector(client, *election);
    if (!elector.RunWhileLeading(stop, [&] { controller.Run(stop); }))
      exit_code = 1;
  } else {
    controller.Run(stop);
  }
  return exit_code;
}

int Run(const RunFlags& flags, const DesiredOptions& desired) {
  // Before any thread starts, so every thread inherits the blocked signals.
  auto signals = common::SignalWaiter::Create();
  if (!signals) {
    spdlog::critical("{}", signals.error());
    return 2;
  }
  common::StopSignal stop;
  common::StopOnSignal stop_on_signal(std::move(*signals), stop);
  const auto config = LoadConfig(flags);
  if (!config) {
    spdlog::critical("{}", config.error());
    return 2;
  }
  spdlog::info("minicluster-controller {} talking to {}", FCC_VERSION,
               config->server);
  const auto election = ElectionOptions(flags, *config);
  if (!election) {
    spdlog::critical("{}", election.error());
    return 2;
  }
  kube::KubeClient client(*config);
  const int exit_code = RunReconciling(flags, desired, client, *election, stop);
  spdlog::info("stopped");
  return exit_code;
}

void AddRunFlags(CLI::App* cmd, RunFlags& flags) {
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
  cmd->add_option("--workload-label-selector", flags.workload_label_selector,
                  "watch only the Kueue Workloads with these labels, e.g. "
                  "minicluster.dev/name once Kueue's "
                  "integrations.labelKeysToCopy lists it (default: all)");
  cmd->add_option("--watch-timeout-seconds", flags.watch_timeout_s,
                  "ask the API server to end each watch after this long")
      ->check(CLI::Range(1, 3600));
}

struct CommonFlags {
  std::string log_format = "text";
  std::string log_level = "info";
  DesiredOptions desired;
};

void AddCommonFlags(CLI::App* cmd, CommonFlags& flags) {
  // Also after "run": the Deployment passes `run --log-format=json`.
  cmd->add_option("--log-format", flags.log_format, "text or json")
      ->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("--log-level", flags.log_level,
                  "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  cmd->add_option("--cluster-domain", flags.desired.cluster_domain,
                  "cluster DNS domain brokers use to reach each other");
  cmd->add_option("--key-id", flags.desired.key_id,
                  "master key id new MiniClusters' certs come from (a "
                  "<id>.key in the driver's master key Secret; every node "
                  "must have it first); empty: the driver's default key");
  cmd->add_option("--flux-view", flags.desired.flux_view,
                  "Flux view new MiniClusters' brokers run from when their "
                  "spec.flux names none (the node driver must serve it)")
      ->capture_default_str();
}

int Render(const std::string& file, const DesiredOptions& desired) {
  const auto text = common::ReadTextFile(file);
  if (!text) {
    std::cerr << "render: " << text.error() << "\n";
    return 1;
  }
  const auto rendered = RenderMiniCluster(*text, desired);
  if (!rendered) {
    std::cerr << "render " << file << ": " << rendered.error() << "\n";
    return 1;
  }
  std::cout << *rendered;
  return 0;
}

}  // namespace
}  // namespace fcc::controller

int main(int argc, char** argv) {
  using namespace fcc::controller;
  CLI::App app{
      "minicluster-controller: runs Flux MiniClusters as suspended Indexed "
      "Jobs"};
  app.set_version_flag("--version", FCC_VERSION);
  CommonFlags common;
  RunFlags flags;
  auto* run = app.add_subcommand("run", "reconcile MiniClusters (the default)");
  for (CLI::App* cmd : {static_cast<CLI::App*>(&app), run}) {
    AddCommonFlags(cmd, common);
    AddRunFlags(cmd, flags);
    cmd->add_flag("--multikueue-worker", common.desired.multikueue_worker,
                  "this cluster is a MultiKueue worker: make the headless "
                  "Service and NetworkPolicy of each MiniCluster Job that "
                  "MultiKueue copies here (docs/admin/multikueue.md)");
  }
  std::string render_file;
  auto* render = app.add_subcommand(
      "render", "print the Service, NetworkPolicy and Job for a MiniCluster");
  render
      ->add_option("-f,--filename", render_file,
                   "MiniCluster manifest (YAML or JSON)")
      ->required();

  CLI11_PARSE(app, argc, argv);
  if (auto logging = fcc::common::ConfigureLogging(
          "minicluster-controller", common.log_format, common.log_level);
      !logging) {
    std::cerr << logging.error() << "\n";
    return 2;
  }
  if (auto checked = CheckDesiredOptions(common.desired); !checked) {
    std::cerr << checked.error() << "\n";
    return 2;
  }
  if (*render) return Render(render_file, common.desired);
  return Run(flags, common.desired);
}
