#include "controller/broker_programs.h"

#include <algorithm>

namespace fcc::controller {
namespace {

// Ready once the local broker is in state `run` (a follower gets there only
// after joining its parent, rank 0 only after every rank has joined), rank
// 0 has a scheduler (SchedulerGate may load it a moment after `run`), and
// rank 0's resource module has its rank online, in R, and neither drained,
// excluded nor torpid: a broker can be in `run` while its rank is unusable.
// The waits for the socket and for `run` let the first probe pass the
// moment the broker is up, not a period later. Every call is bounded by
// 6 s in all (kubelet's timeout is 10 s, and Python's start on a busy node
// takes part of it): a broker or rank 0 that does not
// answer in time (stopped, swapping) repeats the last verdict, for as long
// as flux-core's own heartbeat timeout (5 min) would keep a follower
// waiting for a silent rank 0, so that a stall does not turn every pod
// NotReady at once. A broker that is gone (no socket) is not ready. A
// follower whose rank 0 said it usable less than REUSE seconds ago (the
// ready file's time) does not ask again: in a large instance every
// broker's question costs rank 0 (ReadinessReuseSeconds).
// No shell or grep: `flux uptime` crashes (SIGSEGV) in flux-core 0.88 when
// the broker's uid has no passwd entry, as in many application images.
constexpr char kReadinessCheck[] = R"(import errno, os, signal, sys, time
import flux
from flux.idset import IDset
READY, REUSE = sys.argv[1], float(sys.argv[2])
def verdict(ok, why=''):
    if ok:
        open(READY, 'a').close()
        os.utime(READY)
        sys.exit(0)
    try:
        os.unlink(READY)
    except OSError:
        pass
    sys.exit(why)
def no_answer(*_):
    try:
        age = time.time() - os.stat(READY).st_mtime
    except OSError:
        sys.exit('no answer from the broker or rank 0 in 6 s')
    if age > 300:
        verdict(False, f'no answer from the broker or rank 0 for {age:.0f} s')
    print(f'no answer from the broker or rank 0 in 6 s: ready as {age:.0f} s ago')
    sys.exit(0)
# An RPC blocked in flux-core's C code runs no Python signal handler:
# each has its own deadline; the alarm bounds the rest (the connect).
deadline = time.monotonic() + 5.5
def answer(rpc):
    return rpc.wait_for(max(0.1, deadline - time.monotonic())).get()
signal.signal(signal.SIGALRM, no_answer)
signal.alarm(6)
h = connect(30)
if h is None:
    verdict(False, 'no broker: its local socket does not answer')
try:
    answer(h.rpc('state-machine.wait'))
except OSError as e:
    if e.errno == errno.ETIMEDOUT:
        no_answer()
    verdict(False, f'broker not in state run: {e}')
rank = h.get_rank()
try:
    said = time.time() - os.stat(READY).st_mtime
except OSError:
    said = None
if rank != 0 and said is not None and said < REUSE:
    sys.exit(0)
if rank == 0:
    try:
        mods = answer(h.rpc('module.list'))['mods']
    except OSError:
        no_answer()
    if not scheduler_loaded(mods):
        verdict(False, 'rank 0 has no scheduler loaded (yet: it may wait for every broker)')
while True:
    try:
        s = answer(h.rpc('resource.status', nodeid=0))
    except OSError:
        no_answer()
    if rank in IDset(s['online']):
        break
    if time.monotonic() > deadline - 1:
        verdict(False, f'rank {rank} is not online on rank 0')
    time.sleep(0.1)
if not any(rank in IDset(e['rank']) for e in s['R']['execution']['R_lite']):
    verdict(False, f'rank {rank} has no resources in the instance')
for ids, d in s['drain'].items():
    if rank in IDset(ids):
        verdict(False, f"rank {rank} is drained: {d.get('reason') or 'no reason given'}")
for key, what in (('exclude', 'excluded'), ('torpid', 'torpid')):
    if rank in IDset(s.get(key, '')):
        verdict(False, f'rank {rank} is {what}')
verdict(True))";

// Fluxion's fcfs refuses for good a job asking for more nodes than are up
// (flux-sched's request_feasible: ENODEV), and its backfilling policies let
// later jobs pass it; a stopped queue holds every job in submission order
// and the job manager cancels the alloc requests it had sent. So: no
// scheduler until every rank is online (a restarted rank 0's pending jobs
// would otherwise meet followers not yet back), then the queue stopped
// while any rank is offline. Polled: resource.status is answered on rank 0
// itself, and a follower lost is noticed there after about 2 s anyway.
constexpr char kSchedulerGate[] = R"(import subprocess, sys, time
import flux
from flux.hostlist import Hostlist
from flux.idset import IDset
size, flux_cmd, REASON = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def say(text):
    print(f'minicluster-gate: {text}', file=sys.stderr, flush=True)
# Its broker's only: a gate whose broker is gone ends (the start script
# starts a new one with the next broker). Rank 0 is in `run` once every
# rank has joined (quorum) and rc1 is done.
h = connect(600)
if h is None:
    sys.exit('minicluster-gate: no broker: its local socket does not answer')
try:
    h.rpc('state-machine.wait').get()
except OSError as e:
    sys.exit(f'minicluster-gate: the broker did not get to state run: {e}')
hosts = Hostlist(h.attr_get('hostlist'))
def offline():
    online = IDset(h.rpc('resource.status', nodeid=0).wait_for(30).get()['online'])
    return [r for r in range(size) if r not in online]
def named(ranks):
    return ', '.join(f'{hosts[r]} (rank {r})' for r in ranks)
def load_scheduler(why):
    loaded = subprocess.run([flux_cmd, 'modprobe', 'load', 'sched', 'feasibility'])
    say(f'{why}: ' + ('the scheduler is loaded' if loaded.returncode == 0
        else f'flux modprobe load sched feasibility exited {loaded.returncode}'))
def gate():
    while offline():
        time.sleep(0.2)
    load_scheduler('every broker is online')
    ours = False
    while True:
        down = offline()
        if not down and not ours:
            time.sleep(0.2)
            continue
        q = h.rpc('job-manager.queue-status', {}).wait_for(30).get()
        if down and q['start']:
            h.rpc('job-manager.queue-start', {'start': False, 'all': True, 'nocheckpoint': True,
                  'reason': REASON + named(down)}).wait_for(30).get()
            ours = True
            say(f'queue stopped until {named(down)} are back')
        elif ours and not down:
            if not q['start'] and q.get('stop_reason', '').startswith(REASON):
                h.rpc('job-manager.queue-start', {'start': True, 'all': True,
                      'nocheckpoint': True}).wait_for(30).get()
                say('every broker is back: queue started')
            ours = False
        time.sleep(0.2)
# A gate that fails for any reason but its broker's end loads the
# scheduler if it had not: jobs are then refused as before, never stuck.
try:
    gate()
except (OSError, EOFError) as e:
    sys.exit(f'minicluster-gate: stopped with the broker: {e}')
except Exception as e:
    say(f'failed: {e!r}')
    if not scheduler_loaded(h.rpc('module.list').get()['mods']):
        load_scheduler('without the gate')
    sys.exit(1))";

// The file's text once it has any (with `count`, once it is a count);
// exit 1 past the deadline.
constexpr char kFileTextWait[] = R"(import sys, time
path, end = sys.argv[1], time.monotonic() + float(sys.argv[2])
count = sys.argv[3:] == ['count']
while True:
    try:
        text = open(path).read().strip()
    except OSError:
        text = ''
    if text and (text.isdigit() or not count):
        print(int(text) if count else text)
        sys.exit(0)
    if time.monotonic() > end:
        sys.exit(1)
    time.sleep(0.2))";

// Ranks are hosts in bootstrap order; a host of no domain hangs from the
// cluster. Ranks past RANKS are not in the graph: Fluxion would keep a job
// that asks for an excluded rank waiting (blocking an fcfs queue) where
// without the graph it is refused as unsatisfiable. Each node carries its
// domain as a property too: with a graph, Fluxion takes properties from it, not
// from R's rv1 part.
constexpr char kDomainGraphWriter[] = R"(import json, os, sys, tomllib
from flux.hostlist import Hostlist
topology, hosts, cores, gpus, level, out = sys.argv[1:7]
ranks = list(Hostlist(hosts))[:int(sys.argv[7])] if sys.argv[7:] else Hostlist(hosts)
domain_of = {}
for entry in tomllib.load(open(topology, 'rb'))['resource']['config']:
    for host in Hostlist(entry['hosts']):
        domain_of[host] = entry['properties'][0]
vertices, edges = [], []
def vertex(type_, name, id_, rank, path, properties=None):
    uniq = len(vertices)
    meta = {'type': type_, 'basename': type_, 'name': name, 'id': id_,
            'uniq_id': uniq, 'rank': rank, 'exclusive': False, 'unit': '',
            'size': 1, 'paths': {'containment': path}}
    if properties:
        meta['properties'] = properties
    vertices.append({'id': str(uniq), 'metadata': meta})
    return str(uniq)
def edge(parent, child):
    edges.append({'source': parent, 'target': child,
                  'metadata': {'subsystem': 'containment'}})
cluster = vertex('cluster', 'cluster0', 0, -1, '/cluster0')
domains = {}
for rank, host in enumerate(ranks):
    domain = domain_of.get(host)
    parent, path = cluster, '/cluster0'
    if domain is not None:
        if domain not in domains:
            domains[domain] = vertex(level, domain, len(domains), -1,
                                     f'/cluster0/{domain}')
            edge(cluster, domains[domain])
        parent, path = domains[domain], f'/cluster0/{domain}'
    path += '/' + host
    node = vertex('node', host, rank, rank, path,
                  {domain: ''} if domain is not None else None)
    edge(parent, node)
    for type_, count in (('core', int(cores)), ('gpu', int(gpus))):
        for i in range(count):
            edge(node, vertex(type_, f'{type_}{i}', i, rank, f'{path}/{type_}{i}'))
with open(out + '.tmp', 'w') as f:
    json.dump({'graph': {'nodes': vertices, 'edges': edges}}, f)
os.rename(out + '.tmp', out))";

// Only a job that is a number of nodes is wrapped; one that already names
// a level, asks for slots alone, or says -S topology=any is left as it is.
// The free count is a snapshot at submission: a job queued behind others
// keeps the choice made then. Any failure leaves the job as it is.
constexpr char kDomainFrobnicator[] = R"(import json
import flux
from flux.job.frobnicator import FrobnicatorPlugin
from flux.resource.list import resource_list
def ranks_by_domain():
    graph = json.load(open(GRAPH))['graph']
    meta = {v['id']: v['metadata'] for v in graph['nodes']}
    domains = {}
    for e in graph['edges']:
        parent, child = meta[e['source']], meta[e['target']]
        if parent['type'] == LEVEL and child['type'] == 'node':
            domains.setdefault(parent['name'], []).append(child['rank'])
    return domains
def cores_a_node(node):
    if node.get('exclusive'):
        return None
    cores = 0
    for slot in node.get('with', []):
        per_slot = sum(r.get('count', 1) for r in slot.get('with', [])
                       if r.get('type') == 'core')
        cores += slot.get('count', 1) * per_slot
    return max(cores, 1)
def some_domain_fits(h, domains, count, need):
    lists = resource_list(h).get()
    def fits(rank):
        free = lists.free.copy_ranks(rank).ncores
        if need is None:
            return free > 0 and free == lists.all.copy_ranks(rank).ncores
        return free >= need
    return any(sum(map(fits, ranks)) >= count for ranks in domains.values())
class Frobnicator(FrobnicatorPlugin):
    def configure(self, args, config):
        self.h = None
        try:
            self.domains = ranks_by_domain()
        except (OSError, ValueError, KeyError):
            self.domains = {}
    def frob(self, jobspec, userid, urgency, flags):
        resources = jobspec.jobspec.get('resources', [])
        if len(resources) != 1 or resources[0].get('type') != 'node':
            return
        count = resources[0].get('count')
        system = jobspec.jobspec.get('attributes', {}).get('system', {})
        if not isinstance(count, int) or count < 2 or system.get('topology') == 'any':
            return
        if count > max(map(len, self.domains.values()), default=0):
            return
        try:
            self.h = self.h or flux.Flux()
            fits = some_domain_fits(self.h, self.domains, count, cores_a_node(resources[0]))
        except Exception:
            return
        if fits:
            jobspec.jobspec['resources'] = [
                {'type': LEVEL, 'count': 1, 'with': resources}]
)";

// Nodes are counted where the jobspec asks for them (`-N`); a job that
// asks only for slots is placed by the scheduler within the admitted ones.
constexpr char kAdmittedValidator[] =
    R"(from flux.job.validator import ValidatorPlugin
def admitted():
    try:
        text = open(COUNT).read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
def nodes(resources):
    count = 0
    for r in resources:
        if r.get('type') == 'node':
            c = r.get('count', 1)
            count += c.get('min', 1) if isinstance(c, dict) else c
    return count
class Validator(ValidatorPlugin):
    def validate(self, job):
        have = admitted()
        want = nodes(job.jobspec.get('resources', []))
        if have is not None and have < SIZE and want > have:
            return (19, f'this MiniCluster has {have} brokers, not {SIZE}: Kueue '
                        f'admitted {have} (spec.minSize); ask for at most {have} nodes')
)";

// What both programs share: the way to the local broker, whose socket
// appears a moment after the container (or a restarted broker) starts,
// and whether a module of `module.list`'s provides the scheduler.
constexpr char kCommon[] = R"(import time
import flux
def connect(tries):
    for _ in range(tries):
        try:
            return flux.Flux()
        except OSError:
            time.sleep(0.1)
    return None
def scheduler_loaded(mods):
    return any('sched' in m.get('services', []) for m in mods)
)";

}  // namespace

std::string ReadinessCheck() { return std::string(kCommon) + kReadinessCheck; }

int ReadinessReuseSeconds(int size) {
  const int asks_every = kProbePeriodSeconds * ((size + 255) / 256);
  return std::min(kMaxReuseSeconds, asks_every - kProbePeriodSeconds);
}

std::string SchedulerGate() { return std::string(kCommon) + kSchedulerGate; }

std::string FileTextWait() { return kFileTextWait; }

std::string DomainGraphWriter() { return kDomainGraphWriter; }

std::string DomainFrobnicator(const std::string& graph_path,
                              const std::string& level) {
  // Both are the controller's: a path of plain characters and a label
  // name, quoted by repr's rules.
  return "# Written by minicluster-controller: a job of nodes that fit in one "
         "domain now is placed in one.\nGRAPH = '" +
         graph_path + "'\nLEVEL = '" + level + "'\n" + kDomainFrobnicator;
}

std::string AdmittedValidator(const std::string& count_path, int size) {
  // The path is the controller's (DesiredOptions), quoted by repr's rules
  // for a path of plain characters.
  return "# Written by minicluster-controller: jobs larger than the brokers "
         "Kueue admitted are refused.\nCOUNT = '" +
         count_path + "'\nSIZE = " + std::to_string(size) + "\n" +
         kAdmittedValidator;
}

}  // namespace fcc::controller
