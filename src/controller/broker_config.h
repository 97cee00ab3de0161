// What a MiniCluster's Flux instance is configured with: the broker config
// (broker.toml) and the job shell's rc. Pure functions; the start script
// (desired.h) writes both into the pod.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "controller/desired_options.h"
#include "controller/minicluster.h"

namespace fcc::controller {

// broker.toml: [bootstrap] with curve_cert on the CSI mount, the hosts and
// how brokers reach each other through the headless Service; [resource]
// from the pod's grant; the scheduler (SchedulerConfig); [tbon]; and when
// Kueue may admit fewer brokers than size, the job validator that refuses
// a job larger than the admitted count (kAdmittedValidatorFile).
std::string FluxBrokerConfig(const MiniCluster& mc, const DesiredOptions& opts);

// How [resource] starts in FluxBrokerConfig: the lead of a MiniCluster that
// Kueue admitted in part adds its `exclude` right after it (StartScript).
inline constexpr char kResourceTableHead[] = "[resource]\nnoverify = true\n";

// The job validator plugin (in the config directory), and the admitted
// count: the downward API volume's directory under it and its one file.
inline constexpr char kAdmittedValidatorFile[] = "admitted.py";
inline constexpr char kAdmittedCountFile[] = "count";
std::string AdmittedDir(const DesiredOptions& opts);
std::string AdmittedCountPath(const DesiredOptions& opts);

// The ranks' topology domains (kTopologyAnnotation): the downward API
// volume's directory and file, and how long the lead waits for them.
inline constexpr char kTopologyFile[] = "resource.toml";
inline constexpr int kTopologyWaitSeconds = 60;
std::string TopologyDir(const DesiredOptions& opts);
// Whether the lead adds the ranks' domains to its R: spec.topology is set
// and R comes from the pods' grant ([[resource.config]]; flux-core takes no
// properties beside an R file).
bool ResourcesCarryTopology(const MiniCluster& mc);
// Whether the lead also gives Fluxion its ranks' domains as a level of its
// resource graph (DomainGraphWriter) and places a job of nodes within one
// domain when it can (DomainFrobnicator): the domains are in R and Fluxion
// schedules (sched-simple reads no graph).
bool WritesDomainGraph(const MiniCluster& mc);
// broker.toml, in the config directory.
std::string BrokerConfigPath(const DesiredOptions& opts);
// The graph's file and the frobnicator plugin's, in the config directory.
std::string DomainGraphPath(const DesiredOptions& opts);
inline constexpr char kDomainFrobnicatorFile[] = "domains.py";
// The graph's vertex type for the domains of a Kueue Topology level (a
// node label key): its name part (example.com/rack: `rack`), or `domain`
// where that is a type Flux already has (a level named node or core).
std::string FluxDomainType(const std::string& level);
// [[resource.config]] entries giving each domain's ranks (by the broker
// hostnames of `indexes_by_domain`) that domain's name as a property;
// domains that are not a valid Flux property are left out.
std::string TopologyResourceConfig(
    const MiniCluster& mc,
    const std::map<std::string, std::vector<int>>& indexes_by_domain);

// A MiniCluster without a CPU grant describes its ranks by rank 0's node:
// this shell line (with `flux` the command that runs Flux) writes that R to
// NodeResourcePath before the broker starts; "" when the pod has a grant.
// From config, not discovered, so that a rank that left and rejoined is
// scheduled again (flux-core shrinks a discovered rank's resources for good).
std::string NodeResourceCommand(const MiniCluster& mc,
                                const DesiredOptions& opts,
                                const std::string& flux);
std::string NodeResourcePath(const DesiredOptions& opts);

// The scheduler's part of broker.toml: Fluxion's tables unless
// scheduler.simple (an image with Fluxion of its own honours them too);
// sched-simple is chosen through flux modprobe's alternatives, which
// outrank Fluxion's priority.
std::string SchedulerConfig(const FluxScheduler& scheduler);

// Flux's tree (tbon.topo) for `mc`: spec.tbonTopo, else kary:32 - flat
// (rank 0 the parent of all) up to 33 brokers, where no tree is faster,
// and above it a tree that keeps rank 0's CPU and memory down
// (docs/user/resources.md, "The broker tree").
inline constexpr char kDefaultTbonTopo[] = "kary:32";
std::string TbonTopo(const MiniCluster& mc);

// The job shell's rc (on FLUX_SHELL_RC_PATH, the config directory): the
// MiniCluster's defaults for every job, each unless the job sets it.
inline constexpr char kShellRcFile[] = "minicluster.lua";
std::string ShellRc();

}  // namespace fcc::controller
