#include "controller/broker_config.h"

#include "common/names.h"
#include "common/volume_contract.h"
#include "controller/broker_grant.h"
#include "controller/object_names.h"

namespace fcc::controller {
namespace {

std::string IdRange(int count) {
  return count == 1 ? "0" : "0-" + std::to_string(count - 1);
}

}  // namespace

std::string FluxBrokerConfig(const MiniCluster& mc,
                             const DesiredOptions& opts) {
  const std::string port = std::to_string(mc.spec.broker_port);
  std::string toml;
  toml += "# Flux broker config of MiniCluster " + mc.namespace_name + "/" +
          mc.name + ", written by minicluster-controller.\n";
  toml += "[bootstrap]\n";
  toml += "curve_cert = \"" + opts.curve_mount_path + "/" +
          std::string(common::kCertFileName) + "\"\n";
  toml += "default_port = " + port + "\n";
  toml += "default_bind = \"tcp://0.0.0.0:%p\"\n";
  // %h is the broker's hostname (<job>-<index>); the headless Service gives
  // it a DNS record <host>.<service>.<namespace>.svc.<cluster domain>.
  toml += "default_connect = \"tcp://%h." + ServiceName(mc) + "." +
          mc.namespace_name + ".svc." + opts.cluster_domain + ":%p\"\n";
  toml += "hosts = [{ host = \"" + BrokerHostlist(mc) + "\" }]\n";
  // Each rank's resources from the pod's grant, not the node's hwloc view;
  // also what lets a rank that left be scheduled again when it rejoins
  // (flux-core keeps a departed rank down unless resources come from
  // config). noverify: the ids are counts, not the node's core numbers.
  // Without a CPU grant, R from rank 0's node (NodeResourceCommand): every
  // rank as big as that node, but known in advance, so a rank that left is
  // scheduled again when it rejoins.
  const BrokerResources grant = BrokerResourcesOf(mc.spec.resources);
  toml += kResourceTableHead;
  if (grant.cores > 0) {
    toml += "[[resource.config]]\nhosts = \"" + BrokerHostlist(mc) + "\"\n";
    toml += "cores = \"" + IdRange(grant.cores) + "\"\n";
    if (grant.gpus > 0) toml += "gpus = \"" + IdRange(grant.gpus) + "\"\n";
  } else {
    toml += "path = \"" + NodeResourcePath(opts) + "\"\n";
  }
  toml += SchedulerConfig(mc.spec.flux.scheduler);
  toml += "[tbon]\ntopo = \"" + TbonTopo(mc) + "\"\n";
  if (!mc.ephemeral()) {
    // Rank 0's KVS root is otherwise saved only at a clean stop: a broker
    // that crashed would restart with none of its jobs. Work from the last
    // second is still lost; a checkpoint is one small write to the
    // statedir, and none when nothing changed.
    toml += "[kvs]\ncheckpoint-period = \"1s\"\n";
  }
  if (mc.MayAdmitFewer()) {
    // Replaces the default list, which is jobspec alone.
    toml += "[ingest.validator]\nplugins = [\"jobspec\", \"" +
            opts.config_mount_path + "/" + kAdmittedValidatorFile + "\"]\n";
  }
  return toml;
}

std::string AdmittedDir(const DesiredOptions& opts) {
  return opts.config_mount_path + "/admitted";
}

std::string AdmittedCountPath(const DesiredOptions& opts) {
  return AdmittedDir(opts) + "/" + kAdmittedCountFile;
}

std::string TopologyDir(const DesiredOptions& opts) {
  return opts.config_mount_path + "/topology";
}

bool ResourcesCarryTopology(const MiniCluster& mc) {
  return !mc.spec.topology.level().empty() &&
         BrokerResourcesOf(mc.spec.resources).cores > 0;
}

bool WritesDomainGraph(const MiniCluster& mc) {
  return ResourcesCarryTopology(mc) && !mc.spec.flux.scheduler.simple;
}

std::string BrokerConfigPath(const DesiredOptions& opts) {
  return opts.config_mount_path + "/broker.toml";
}

std::string DomainGraphPath(const DesiredOptions& opts) {
  return opts.config_mount_path + "/domains.json";
}

std::string FluxDomainType(const std::string& level) {
  std::string name = level.substr(level.find('/') + 1);
  for (const char* type :
       {"cluster", "node", "socket", "core", "gpu", "memory", "slot"}) {
    if (name == type) return "domain";
  }
  return name;
}

std::string TopologyResourceConfig(
    const MiniCluster& mc,
    const std::map<std::string, std::vector<int>>& indexes_by_domain) {
  std::string toml;
  for (const auto& [domain, indexes] : indexes_by_domain) {
    // A node label value, which has none of the characters RFC 20 keeps
    // out of a property name; an empty one names no domain.
    if (domain.empty() || !common::IsLabelValue(domain)) continue;
    toml += "[[resource.config]]\nhosts = \"" + HostlistOf(mc, indexes) +
            "\"\nproperties = [\"" + domain + "\"]\n";
  }
  return toml;
}

std::string NodeResourcePath(const DesiredOptions& opts) {
  return opts.config_mount_path + "/R";
}

std::string NodeResourceCommand(const MiniCluster& mc,
                                const DesiredOptions& opts,
                                const std::string& flux) {
  if (BrokerResourcesOf(mc.spec.resources).cores > 0) return "";
  return flux + " R encode --hosts='" + BrokerHostlist(mc) + "' --local > " +
         NodeResourcePath(opts) + "\n";
}

std::string SchedulerConfig(const FluxScheduler& scheduler) {
  if (scheduler.simple) {
    // sched-simple provides both services Fluxion would (its qmanager the
    // scheduler, its feasibility module the feasibility checks).
    return "[modules.alternatives]\n"
           "sched = \"sched-simple\"\n"
           "feasibility = \"sched-simple\"\n";
  }
  const std::string policy = scheduler.queue_policy.empty()
                                 ? std::string(kQueuePolicies[0])
                                 : scheduler.queue_policy;
  // match-policy first: Fluxion's default, said so that the config reads
  // whole; rv1 without JGF, as [resource] gives it, is what Fluxion's
  // default match-format (rv1_nosched) reads.
  return "[sched-fluxion-qmanager]\nqueue-policy = \"" + policy + "\"\n" +
         "[sched-fluxion-resource]\nmatch-policy = \"first\"\n";
}

std::string TbonTopo(const MiniCluster& mc) {
  return mc.spec.tbon_topo.empty() ? kDefaultTbonTopo : mc.spec.tbon_topo;
}

std::string ShellRc() {
  // cpu-affinity: Flux's core ids are counts (0..N-1 of the pod's grant),
  // not the pod's cores, so the shell's default binding would put every
  // pod's tasks on a node onto the node's first cores.
  // pmi: PMI-1 (MPICH, Open MPI 4 through its Flux component) and PMIx
  // (Open MPI 5, which has no other way in). flux-pmix reads the option when
  // the shell loads its *.so plugins, before this rc runs, so it is loaded
  // again here; an image's Flux without flux-pmix keeps PMI-1 alone.
  return "-- Written by minicluster-controller: defaults for every job.\n"
         "if shell.options[\"cpu-affinity\"] == nil then\n"
         "  shell.options[\"cpu-affinity\"] = \"off\"\n"
         "end\n"
         "if shell.options[\"pmi\"] == nil then\n"
         "  shell.options[\"pmi\"] = \"simple,pmix\"\n"
         "  if not pcall(plugin.load, { file = \"pmix.so\", conf = {} }) then\n"
         "    shell.options[\"pmi\"] = \"simple\"\n"
         "  end\n"
         "end\n";
}

}  // namespace fcc::controller
