// The Python programs the broker pods run beside their broker, through
// flux-core's own Python bindings (every Flux instance has them: rc1 is
// `flux modprobe`), so an image needs no Python or shell of its own. Pure
// text, for the start script and the pod template.
#pragma once

#include <string>

namespace fcc::controller {

// The readiness probe, `flux python -c CHECK READY_FILE REUSE`: exit 0 once
// the local broker is in `run` and its rank is usable on rank 0. READY_FILE
// keeps its last verdict, which it repeats (saying so) for up to 5 minutes
// when the broker or rank 0 does not answer in time, and without asking
// rank 0 for REUSE seconds after rank 0 said the rank usable.
std::string ReadinessCheck();

// The probe's period, and REUSE for an instance of `size` brokers: each
// asks rank 0 about every 5 s x ceil(size / 256), so rank 0 answers at
// most about 51 probes a second (0.23 ms of its CPU each at 512 brokers on
// loopback: about 1.2% of a core) up to 300 s between asks; 0 up to 256.
inline constexpr int kProbePeriodSeconds = 5;
inline constexpr int kMaxReuseSeconds = 295;
int ReadinessReuseSeconds(int size);

// Rank 0's scheduler gate, `flux python -c GATE SIZE FLUX REASON`: loads the
// scheduler once ranks 0..SIZE-1 are online (the broker runs rc1 without
// one, FLUX_SCHED_MODULE=none), then stops the queue while any of them is
// offline and starts it again when all are back, so that a job waits for
// a broker that is coming instead of being refused as unsatisfiable.
std::string SchedulerGate();

// The lead's wait for the controller's word on its pod (the downward API's
// view of an annotation), `flux python -c WAIT FILE SECONDS [count]`:
// prints FILE's text once it has any (with `count`, the admitted count
// once FILE holds one), exit 1 when none came in SECONDS.
std::string FileTextWait();

// The lead's writer of its ranks' domains as a level of Fluxion's resource
// graph, `flux python -c WRITER TOPOLOGY HOSTS CORES GPUS LEVEL OUT
// [RANKS]`: reads the [[resource.config]] domains of TOPOLOGY
// (TopologyResourceConfig) and writes OUT, JGF of cluster, LEVEL vertices,
// HOSTS' nodes (rank = place in HOSTS; the first RANKS only, the ranks
// Kueue admitted) with their domain as a property, and CORES and GPUS each.
// Fluxion reads it from R's `scheduling` key ([resource] scheduling) instead of
// rv1.
std::string DomainGraphWriter();

// The instance's jobspec frobnicator plugin (flux job-frobnicator loads a
// plugin by its path): a job of N >= 2 nodes is wrapped in one LEVEL
// vertex (`level[1] -> node[N]`) when some domain of the graph at
// `graph_path` has N nodes free for it now, so Fluxion places it within
// one domain; otherwise it is left to spread.
std::string DomainFrobnicator(const std::string& graph_path,
                              const std::string& level);

// The instance's job validator plugin (flux job-validator loads a plugin by
// its path): a job asking for more nodes than the brokers Kueue admitted
// is refused at submission, naming the count, which it reads from
// `count_path` (no count yet: no limit). `size`: spec.size.
std::string AdmittedValidator(const std::string& count_path, int size);

// What the gate writes as the queue's stop reason: a queue stopped with
// any other reason (by a user) is never started by the gate.
inline constexpr char kGateStopReason[] = "waiting for brokers: ";

}  // namespace fcc::controller
