#!/usr/bin/python3
"""Real Flux brokers on loopback, per tree topology (tbon.topo) and size.

For each size N and topology, N flux-broker processes on 127.0.0.1 boot from
config the way a MiniCluster's brokers do: with the cert the real driver
(flux-curve-csi) publishes and the broker TOML the real controller
(minicluster-controller render) writes, rewritten only where loopback needs
it (cert path, per-rank hosts with 127.0.0.1 ports, the resource hostlist,
[tbon] topo). Rank 0's initial program marks quorum (it runs only once all N
brokers are online), times `flux run -N<N> true`, then exits, which shuts the
instance down. Reported per (N, topology), median over --runs:

  depth        tbon.maxlevel, the tree's height (rank 0 also reports the
               tbon.topo asked for, or the run fails)
  quorum_s     broker launch -> rank 0's initial program starts (quorum)
  run_s        `flux run -N<N> true` on rank 0
  rank0_cpu_s  rank 0 broker's utime+stime (/proc/<pid>/stat, no children),
               sampled after the run, before shutdown
  rank0_hwm_mib  rank 0 broker's peak RSS (VmHWM), sampled then too
  shutdown_s   initial program released -> every broker exited
  total_s      broker launch -> every broker exited
  all_cpu_s    CPU of the whole instance, launch -> exit: every broker and
               what they ran (rc scripts, flux run, job shells)
  others_cpu_s CPU the rest of the machine used meanwhile (/proc/stat's busy
               time minus all_cpu_s): the noise in this row's times
With --probes K (issue 60), after the run the last rank asks rank 0 K times
what every broker's readiness probe asks it (resource.status), one after
another, and two more columns (rank0_cpu_s then leaves them out):
  probe_ms     rank 0's CPU per such request (ms), less its idle CPU over
               as long a time
  probes_pct   what N brokers probing every 5 s cost rank 0, in % of a core

Usage (root; it mounts, in private mount and PID namespaces of its own):
  bench/tbon_bench.py [--sizes 8,32,128] [--topo kary:0,kary:2,...]
                      [--runs 1] [--csv FILE] [--plot FILE.png] [--verbose]
scripts/bench-tbon builds the binaries, runs this and writes the outputs.

Env: FCC_BUILD_DIR (default build: the binaries, unless --driver,
--kubelet, --controller name them), FCC_FLUX_CORE (scripts/flux-core-tarball),
FCC_CACHE (default ~/.cache/flux-curve-csi: the unpacked flux-core),
FCC_REQUIRE_MOUNT_TESTS=1 (not root is a failure, not a skip).
Exit: 0 all measured, 1 a failure (named), 77 skipped (not root).
"""

import argparse
import copy
import csv
import difflib
import hashlib
import os
import re
import resource
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLUX_PREFIX = "/opt/flux"  # flux-core's compiled-in prefix
CERT_FILE = "curve.cert"  # src/common/volume_contract.h kCertFileName
NAMESPACE = "default"
MINICLUSTER = "bench"
HOST_PREFIX = "b"  # broker hostnames b0..b<N-1>
DEFAULT_TOPOS = "kary:0,kary:2,kary:8,kary:32,binomial"
COLUMNS = ("quorum_s", "run_s", "rank0_cpu_s", "rank0_hwm_mib", "shutdown_s", "total_s",
           "all_cpu_s", "others_cpu_s")

VERBOSE = False


class BenchError(Exception):
    """A failure to report as `tbon_bench: <message>` and exit 1."""


def log(msg):
    print(f"tbon_bench: {msg}", file=sys.stderr, flush=True)


def vlog(msg):
    if VERBOSE:
        log(msg)


# ------------------------------------------------------------------ options

def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="tbon_bench.py",
        description="Real Flux brokers on loopback: quorum, flux run, CPU, memory and "
                    "shutdown per tbon.topo and size.")
    p.add_argument("--sizes", default="8,32,128", help="broker counts N, comma-separated")
    p.add_argument("--topo", default=DEFAULT_TOPOS,
                   help="tbon.topo values, comma-separated (kary:0 is flat)")
    p.add_argument("--runs", type=int, default=1, help="repeats per (N, topo); the median is reported")
    p.add_argument("--probes", type=int, default=0,
                   help="readiness probe requests to time on rank 0 after the run (0: none)")
    p.add_argument("--csv", help="write the table as CSV here")
    p.add_argument("--plot", help="write a PNG here (needs python3-matplotlib)")
    p.add_argument("--timeout-scale", type=float, default=1.0,
                   help="multiply every timeout (they grow with N) by this")
    p.add_argument("--build-dir", default=os.environ.get("FCC_BUILD_DIR", "build"),
                   help="where the binaries are (default $FCC_BUILD_DIR or build)")
    p.add_argument("--driver", help="flux-curve-csi (default <build-dir>/src/driver/flux-curve-csi)")
    p.add_argument("--kubelet", help="fcc-kubelet (default <build-dir>/test/tools/fcc-kubelet)")
    p.add_argument("--controller",
                   help="minicluster-controller (default <build-dir>/src/controller/minicluster-controller)")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="progress, the config rewrite as a diff, the broker command")
    a = p.parse_args(argv)
    try:
        a.sizes = [int(s) for s in a.sizes.split(",") if s]
    except ValueError:
        p.error(f"--sizes {a.sizes!r}: want integers, e.g. 8,32,128")
    if not a.sizes or min(a.sizes) < 1:
        p.error("--sizes: each size must be >= 1")
    a.topo = [t for t in a.topo.split(",") if t]
    for t in a.topo:
        if not re.fullmatch(r"kary:\d+|binomial|mincrit(:\d+)?", t):
            p.error(f"--topo {t!r}: want kary:<k>, binomial or mincrit[:<k>]")
    if a.runs < 1:
        p.error("--runs must be >= 1")
    if a.probes < 0:
        p.error("--probes must be >= 0")
    build = os.path.abspath(a.build_dir)
    a.driver = os.path.abspath(a.driver or f"{build}/src/driver/flux-curve-csi")
    a.kubelet = os.path.abspath(a.kubelet or f"{build}/test/tools/fcc-kubelet")
    a.controller = os.path.abspath(a.controller or f"{build}/src/controller/minicluster-controller")
    for f in ("csv", "plot"):
        if getattr(a, f):
            setattr(a, f, os.path.abspath(getattr(a, f)))
    return a


# ------------------------------------------- stage 1: host mount namespace

def flux_core_dir():
    """flux-core unpacked once per tarball into the cache; returns its flux/."""
    r = subprocess.run([f"{REPO}/scripts/flux-core-tarball"], stdout=subprocess.PIPE, text=True)
    if r.returncode != 0:  # it has said why on stderr
        raise BenchError("no flux-core tarball (see above)")
    tarball = r.stdout.strip()
    h = hashlib.sha256()
    with open(tarball, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    cache = os.environ.get("FCC_CACHE") or os.path.expanduser("~/.cache/flux-curve-csi")
    dest = os.path.join(cache, f"flux-core-{h.hexdigest()[:16]}")
    if not os.path.isfile(f"{dest}/flux/bin/flux"):
        log(f"unpacking {os.path.basename(tarball)} into {dest}")
        os.makedirs(cache, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f"{os.path.basename(dest)}.tmp.", dir=cache)
        try:
            subprocess.run(["tar", "-C", tmp, "-xzf", tarball], check=True)
            if not os.path.isfile(f"{tmp}/flux/bin/flux"):
                raise BenchError(f"{tarball} has no flux/bin/flux: not a flux-core tarball "
                                 "(its top directory must be flux/; docs/internals/node.md)")
            if os.path.isdir(dest):  # an unpack cut short
                shutil.rmtree(dest)
            # Whole or absent; a concurrent run that got there first wins.
            os.rename(tmp, dest)
        except OSError:
            if not os.path.isfile(f"{dest}/flux/bin/flux"):
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return f"{dest}/flux"


def enter_namespaces(args):
    """Re-runs this script in new mount and PID namespaces. The PID namespace
    is the cleanup: brokers put their children (rc scripts, job shells) in
    process groups of their own, so no one group holds everything, but when
    this script (the namespace's init) exits, the kernel kills every process
    in it; --kill-child does the same if unshare itself is killed."""
    for tool in (args.driver, args.kubelet, args.controller):
        if not os.access(tool, os.X_OK):
            raise BenchError(f"{tool} is missing: build it with `ninja -C {args.build_dir} "
                             "flux-curve-csi fcc-kubelet minicluster-controller` "
                             "(cmake with FCC_BUILD_TESTS=ON), or run scripts/bench-tbon")
    flux_dir = flux_core_dir()
    if os.path.lexists(FLUX_PREFIX) and not os.path.isdir(FLUX_PREFIX):
        raise BenchError(f"{FLUX_PREFIX} exists and is not a directory: the bench binds flux-core "
                         "there (in its own mount namespace only); move it away")
    env = dict(os.environ, FCC_TBON_STAGE="inside", FCC_TBON_FLUX_DIR=flux_dir,
               FCC_TBON_HOST_MNT=os.readlink("/proc/self/ns/mnt"))
    cmd = ["unshare", "--mount", "--propagation", "private", "--pid", "--fork",
           "--kill-child", "--mount-proc", "--", sys.executable, os.path.abspath(__file__)]
    os.execvpe("unshare", cmd + sys.argv[1:], env)


# ------------------------------------ stage 2: private mount/PID namespace

def sh(*cmd, **kw):
    return subprocess.run(list(cmd), check=True, **kw)


def check_private_namespace():
    # Like scripts/demo's check, but /proc/1 is this script in the new PID
    # namespace: compare with the mount namespace stage 1 ran in.
    host = os.environ.get("FCC_TBON_HOST_MNT")
    if not host or os.readlink("/proc/self/ns/mnt") == host:
        raise BenchError("refusing to mount in the host's mount namespace")


def setup_mounts(flux_dir):
    """A 0700 tmpfs for everything the run writes; flux-core at /opt/flux,
    read-only. Both exist only in this namespace."""
    scratch = tempfile.mkdtemp(prefix="fcc-tbon.")
    sh("mount", "-t", "tmpfs", "-o", "size=4g,mode=0700,nosuid,nodev", "fcc-tbon", scratch)
    if not os.path.isdir(FLUX_PREFIX):
        # The host keeps an empty /opt/flux; the bind below is ours alone.
        os.makedirs(FLUX_PREFIX, exist_ok=True)
    sh("mount", "--bind", flux_dir, FLUX_PREFIX)
    sh("mount", "-o", "remount,bind,ro", FLUX_PREFIX)
    return scratch


def broker_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FLUX_", "FCC_TBON_")) and k not in ("PYTHONPATH", "LUA_PATH")}
    env["PATH"] = f"{FLUX_PREFIX}/bin:" + env.get("PATH", "/usr/bin:/bin")
    return env


def check_flux_runs():
    r = subprocess.run([f"{FLUX_PREFIX}/bin/flux", "python", "-c",
                        "import flux, yaml, ply, _cffi_backend"],
                       env=broker_env(), capture_output=True, text=True)
    if r.returncode != 0:
        raise BenchError(
            f"flux-core does not run here ({r.stderr.strip()[-400:]}): a runtime Debian package "
            "of it is probably missing; scripts/install-deps installs them "
            "(flux_runtime_packages, as listed in ../shared/flux-core/README.md)")


def raise_fd_limit():
    # Rank 0 of a flat tree holds a connection per broker.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Driver:
    """The real flux-curve-csi serving one node, publishing the bench's one
    cert volume the way kubelet asks for it (fcc-kubelet)."""

    def __init__(self, args, scratch):
        self.args = args
        self.dir = f"{scratch}/node"
        self.endpoint = f"unix://{self.dir}/plugin/csi.sock"
        self.proc = None
        self.pod_uid = None
        os.makedirs(f"{self.dir}/plugin")
        os.makedirs(f"{self.dir}/pods")

    def start(self):
        key = f"{self.dir}/master.key"  # never printed
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        os.write(fd, os.urandom(64))
        os.close(fd)
        with open(f"{self.dir}/driver.log", "wb") as out:
            self.proc = subprocess.Popen(
                [self.args.driver, "--log-level=info", "serve", "--endpoint", self.endpoint,
                 "--node-id", "bench", "--master-key-file", key, "--kubelet-dir", self.dir],
                stdout=out, stderr=subprocess.STDOUT)
        r = subprocess.run([self.args.kubelet, "probe", "--endpoint", self.endpoint,
                            "--timeout-ms", "10000"], capture_output=True, text=True)
        if r.returncode != 0:
            raise BenchError(f"the driver did not become ready: {r.stderr.strip()}\n"
                             + self.log_tail())

    def publish(self, attrs):
        """NodePublishVolume for pod bench-0; returns the cert's path."""
        self.pod_uid = str(uuid.uuid4())
        cmd = [self.args.kubelet, "publish", "--endpoint", self.endpoint,
               "--pods-dir", f"{self.dir}/pods", "--namespace", NAMESPACE,
               "--pod", f"{MINICLUSTER}-0", "--pod-uid", self.pod_uid]
        for k, v in attrs.items():
            cmd += ["--attr", f"{k}={v}"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise BenchError(f"publishing the cert volume failed: {r.stderr.strip()}")
        cert = os.path.join(r.stdout.strip(), CERT_FILE)
        st = os.stat(cert)
        if st.st_mode & 0o077:  # brokers refuse such a cert
            raise BenchError(f"{cert} is readable by group or other (mode {st.st_mode & 0o777:o})")
        return cert

    def stop(self):
        if not self.proc:
            return
        if self.pod_uid and self.proc.poll() is None:
            subprocess.run([self.args.kubelet, "unpublish", "--endpoint", self.endpoint,
                            "--pods-dir", f"{self.dir}/pods", "--pod-uid", self.pod_uid],
                           capture_output=True)
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def log_tail(self):
        return tail(f"{self.dir}/driver.log", 20)


def tail(path, lines):
    try:
        with open(path, errors="replace") as f:
            text = f.read().splitlines()[-lines:]
    except OSError as e:
        return f"({path}: {e.strerror})"
    return "\n".join(f"  | {line}" for line in text) or f"  ({path} is empty)"


# ----------------------------------------------------- the rendered config

def render(args, size, scratch, program):
    """minicluster-controller render of a size-N ephemeral MiniCluster."""
    manifest = f"{scratch}/minicluster-{size}.yaml"
    with open(manifest, "w") as f:
        # cpu limit: the controller renders [resource] only with one.
        f.write(f"""apiVersion: minicluster.dev/v1alpha1
kind: MiniCluster
metadata:
  name: {MINICLUSTER}
  namespace: {NAMESPACE}
spec:
  size: {size}
  image: example.invalid/flux:bench
  command: ["{program}"]
  resources:
    limits:
      cpu: 1
""")
    r = subprocess.run([args.controller, "render", "-f", manifest], capture_output=True, text=True)
    if r.returncode != 0:
        raise BenchError(f"minicluster-controller render failed: {r.stderr.strip()}")
    return r.stdout


def rendered_job(rendered):
    """The Job of `minicluster-controller render`'s YAML stream."""
    jobs = [o for o in yaml.safe_load_all(rendered) if o and o.get("kind") == "Job"]
    if len(jobs) != 1:
        raise BenchError(f"render printed {len(jobs)} Jobs, not 1")
    return jobs[0]


def broker_container(job):
    return next(c for c in job["spec"]["template"]["spec"]["containers"]
                if c["name"] == "flux-broker")


def curve_volume_attributes(job):
    """The attributes the controller gives the Job's curve volume."""
    for v in job["spec"]["template"]["spec"].get("volumes", []):
        attrs = (v.get("csi") or {}).get("volumeAttributes") or {}
        if "minicluster" in attrs:
            return dict(attrs)
    raise BenchError("the rendered Job has no curve volume (volumeAttributes.minicluster)")


def start_script_parts(rendered):
    """(broker TOML, `flux start` options) from the Job's start script: the
    TOML is the shell-single-quoted word of its `printf '%s' '...' > X`."""
    command = broker_container(rendered_job(rendered))["command"]
    scripts = [w for w in command if "printf '%s' " in w]
    if len(scripts) != 1:
        raise BenchError("the rendered broker container has no start script with "
                         "printf '%s' '<toml>': bench/tbon_bench.py's parser needs updating")
    script = scripts[0]
    lexer = shlex.shlex(script[script.index("printf '%s' "):], posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = [next(lexer) for _ in range(5)]
    if words[1] != "%s" or words[3] != ">" or not words[4].endswith(".toml"):
        raise BenchError(f"unexpected printf line in the start script: {words[:2]} ... {words[3:]}")
    toml_text, toml_path = words[2], words[4]
    for line in script.splitlines():
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            continue
        if len(tokens) >= 2 and tokens[0].endswith("/flux") and tokens[1] == "start":
            opts = tokens[2:tokens.index("--")] if "--" in tokens else tokens[2:]
            if f"--config-path={toml_path}" not in opts:
                raise BenchError(f"the start script's flux start does not read {toml_path}: {line.strip()}")
            return toml_text, opts
    raise BenchError("the rendered start script has no `flux start` line")


def hostlist_expand(text):
    """A hostlist as the controller writes them: name-[0-7], a,b[1,3-5]."""
    parts, depth, cur = [], 0, ""
    for c in text:
        depth += (c == "[") - (c == "]")
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    parts.append(cur)
    names = []
    for part in parts:
        m = re.fullmatch(r"([^\[\]]*)\[([^\[\]]+)\]([^\[\]]*)", part.strip())
        if not m:
            names.append(part.strip())
            continue
        pre, ranges, post = m.groups()
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
            names += [f"{pre}{i:0{width}d}{post}" for i in range(int(lo), int(hi or lo) + 1)]
    return names


def hostlist_of_ranks(ranks):
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"{HOST_PREFIX}{ranks[0]}"
    spans, start = [], ranks[0]
    for prev, cur in zip(ranks, ranks[1:] + [None]):
        if cur != prev + 1:
            spans.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = cur
    return f"{HOST_PREFIX}[{','.join(spans)}]"


def toml_statements(lines):
    """(first, last, table, key) per key/value statement, table being the
    [header] it is under ("" at top level); values may span lines (arrays,
    inline tables; strings and comments are skipped when matching brackets).
    Headers come as (i, i, name, None)."""
    table, i = "", 0
    while i < len(lines):
        s = lines[i].strip()
        if not s or s.startswith("#"):
            i += 1
            continue
        m = re.fullmatch(r"\[\[?\s*([^\[\]]+?)\s*\]\]?\s*(#.*)?", s)
        if m:
            table = m.group(1)
            yield i, i, table, None
            i += 1
            continue
        key, eq, rest = lines[i].partition("=")
        if not eq:
            raise BenchError(f"broker.toml line {i + 1} is not key = value: {s}")
        first, depth, quote = i, 0, None
        while True:
            for c in rest:
                if quote:
                    quote = None if c == quote else quote  # no escaped quotes in this config
                elif c in "\"'":
                    quote = c
                elif c == "#":
                    break
                elif c in "[{":
                    depth += 1
                elif c in "]}":
                    depth -= 1
            if depth <= 0 or i + 1 >= len(lines):
                break
            i += 1
            rest = lines[i]
        yield first, i, table, key.strip()
        i += 1


def toml_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def loopback_toml(rendered, size, cert, ports, topo):
    """The rendered broker TOML with only what loopback needs rewritten:
    [bootstrap] curve_cert, hosts (one entry per rank with its 127.0.0.1
    port; default_bind and default_connect go, the entries carry their own),
    the [[resource.config]] hostlists and [tbon] topo. Checked with tomllib:
    the result must equal the rendered config with exactly those changes."""
    orig = tomllib.loads(rendered)
    boot = orig.get("bootstrap", {})
    names = []
    for entry in boot.get("hosts", []):
        names += hostlist_expand(entry["host"])
    if len(names) != size:
        raise BenchError(f"the rendered [bootstrap] hosts name {len(names)} brokers, not {size}")
    rank_of = {name: rank for rank, name in enumerate(names)}
    hosts_block = ["hosts = ["] + [
        f'  {{ host = "{HOST_PREFIX}{r}", bind = "tcp://127.0.0.1:{p}", '
        f'connect = "tcp://127.0.0.1:{p}" }},' for r, p in enumerate(ports)] + ["]"]

    def resource_hosts(value):
        try:
            return hostlist_of_ranks([rank_of[n] for n in hostlist_expand(value)])
        except KeyError as e:
            raise BenchError(f"[[resource.config]] hosts {value!r} names {e}, not a broker of "
                             "[bootstrap] hosts") from None

    lines = rendered.splitlines()
    out, tbon_header, tbon_topo_set, pos = [], None, False, 0
    for first, last, table, key in toml_statements(lines):
        out += lines[pos:first]
        pos = last + 1
        stmt = lines[first:last + 1]
        if key is None:
            out += stmt
            if table == "tbon":
                tbon_header = len(out)
            continue
        if table == "bootstrap" and key == "curve_cert":
            stmt = [f"curve_cert = {toml_string(cert)}"]
        elif table == "bootstrap" and key in ("default_bind", "default_connect"):
            stmt = []
        elif table == "bootstrap" and key == "hosts":
            stmt = hosts_block
        elif table == "resource.config" and key == "hosts":
            value = tomllib.loads("\n".join(stmt))["hosts"]
            stmt = [f"hosts = {toml_string(resource_hosts(value))}"]
        elif (table, key) in (("tbon", "topo"), ("", "tbon.topo")):
            stmt = [f"{key} = {toml_string(topo)}"]
            tbon_topo_set = True
        out += stmt
    out += lines[pos:]
    if not tbon_topo_set:
        if tbon_header is not None:
            out.insert(tbon_header, f"topo = {toml_string(topo)}")
        else:
            out += ["[tbon]", f"topo = {toml_string(topo)}"]
    text = "\n".join(out) + "\n"

    want = copy.deepcopy(orig)
    wb = want.setdefault("bootstrap", {})
    wb["curve_cert"] = cert
    wb.pop("default_bind", None)
    wb.pop("default_connect", None)
    wb["hosts"] = [{"host": f"{HOST_PREFIX}{r}", "bind": f"tcp://127.0.0.1:{p}",
                    "connect": f"tcp://127.0.0.1:{p}"} for r, p in enumerate(ports)]
    for rc in want.get("resource", {}).get("config", []):
        if "hosts" in rc:
            rc["hosts"] = resource_hosts(rc["hosts"])
    want.setdefault("tbon", {})["topo"] = topo
    try:
        got = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BenchError(f"the rewritten broker.toml does not parse: {e}") from None
    if got != want:
        raise BenchError("rewriting broker.toml changed more than the loopback keys "
                         "(bench/tbon_bench.py's TOML editing needs updating)")
    return text


def broker_options(rendered_opts):
    """The rendered `flux start` options minus those set per rank here."""
    per_rank = ("rundir", "statedir", "local-uri", "hostname", "tbon.topo")
    keep = []
    it = iter(rendered_opts)
    for opt in it:
        if opt.startswith("--config-path="):
            continue
        attr = None
        if opt in ("-S", "--setattr"):
            value = next(it, "")
            attr, opt = value, f"-S{value}"
        elif opt.startswith("--setattr="):
            attr = opt[len("--setattr="):]
        elif opt.startswith("-S"):
            attr = opt[2:]
        if attr and attr.split("=", 1)[0] in per_rank:
            continue
        keep.append(opt)
    return keep


# ------------------------------------------------------------------ a run

INITIAL_PROGRAM = r"""#!/bin/sh
# Rank 0's initial program: the broker starts it once quorum is reached
# (every broker online). Its exit shuts the instance down.
d=$FCC_TBON_RUN_DIR
date +%s.%N >"$d/quorum.tmp" && mv "$d/quorum.tmp" "$d/quorum"
start=$(date +%s.%N)
flux run -N"$FCC_TBON_SIZE" true >"$d/run.out" 2>&1
rc=$?
end=$(date +%s.%N)
# The tree the brokers built: the bench checks the topology it asked for.
echo "$(flux getattr tbon.topo) $(flux getattr tbon.maxlevel)" >"$d/tree"
if [ "${FCC_TBON_PROBES:-0}" -gt 0 ]; then
  flux python "$d/../probe.py" "$FCC_TBON_PROBES" >"$d/probe" 2>"$d/probe.err" || rc=1
fi
echo "$rc $start $end" >"$d/run.tmp" && mv "$d/run.tmp" "$d/run"
# Held until the bench has read rank 0's /proc (CPU, peak RSS).
while [ ! -e "$d/release" ]; do sleep 0.02; done
exit "$rc"
"""

# Rank 0's CPU for K of the readiness probe's requests to it, sent from the
# last rank (through the tree, as a broker's probe does), less rank 0's
# idle CPU over as long: prints K, those CPU seconds, the seconds taken,
# and rank 0's CPU over the whole step (which rank0_cpu_s leaves out).
PROBE_PROGRAM = r"""import os, subprocess, sys, time
import flux
h = flux.Flux()
pid, last = int(h.attr_get("broker.pid")), int(h.attr_get("size")) - 1
def cpu():
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
ask = ("import flux, sys\nh = flux.Flux()\nfor _ in range(int(sys.argv[1])):\n"
       "    h.rpc('resource.status', nodeid=0).get()\n")
k = sys.argv[1]
c0, t0 = cpu(), time.monotonic()
subprocess.run(["flux", "exec", "-r", str(last), "flux", "python", "-c", ask, k], check=True)
busy, took = cpu() - c0, time.monotonic() - t0
c1 = cpu()
time.sleep(took)
print(k, busy - (cpu() - c1), took, cpu() - c0)
"""


def free_ports(n):
    """n distinct free TCP ports on 127.0.0.1 (all held open while chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def proc_sample(pid):
    """utime+stime in seconds and VmHWM in MiB of one process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks  # fields 14 and 15 of stat(5)
    hwm = None
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    return cpu, hwm


def cpu_times():
    """(CPU seconds of this script and every descendant it reaped, busy CPU
    seconds of the whole machine): brokers are reaped by this script, their
    children by them (or by this script, the PID namespace's init)."""
    t = os.times()
    with open("/proc/stat") as f:
        user, nice, system, idle, iowait, irq, softirq, steal = map(int, f.readline().split()[1:9])
    busy = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    return t.user + t.system + t.children_user + t.children_system, busy


def other_processes(known):
    """Processes in this PID namespace besides this script and `known`;
    reaps the zombies of orphans (this script is their init)."""
    left = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in known or int(name) == os.getpid():
            continue
        pid = int(name)
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        state = stat.rsplit(")", 1)[1].split()[0]
        if state == "Z":
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            continue
        left.append(f"{pid} ({stat[stat.index('(') + 1:stat.rindex(')')]})")
    return left


def kill_all_others():
    """SIGKILLs every other process in this PID namespace and reaps them."""
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                os.kill(int(name), signal.SIGKILL)
            except ProcessLookupError:
                pass
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return


class Run:
    """One instance of `size` brokers with one topology."""

    def __init__(self, args, scratch, size, topo, index, toml_text, opts, timeouts):
        self.args, self.size, self.topo, self.timeouts = args, size, topo, timeouts
        self.probes = args.probes
        self.name = f"N={size} {topo} run {index}"
        self.dir = f"{scratch}/n{size}-{topo.replace(':', '')}-{index}"
        os.makedirs(f"{self.dir}/log")
        self.toml = f"{self.dir}/broker.toml"
        with open(self.toml, "w") as f:
            f.write(toml_text)
        self.opts = opts
        self.procs = []

    def argv(self, rank, program):
        d = f"{self.dir}/r{rank}"
        return [f"{FLUX_PREFIX}/bin/flux", "start", f"--config-path={self.toml}", *self.opts,
                f"-Shostname={HOST_PREFIX}{rank}", f"-Srundir={d}", f"-Sstatedir={d}/state",
                f"-Slocal-uri=local://{d}/local", "--", program]

    def launch(self, program):
        env = dict(broker_env(), FCC_TBON_RUN_DIR=self.dir, FCC_TBON_SIZE=str(self.size),
                   FCC_TBON_PROBES=str(self.probes))
        vlog(f"{self.name}: rank 0: {shlex.join(self.argv(0, program))}")
        for rank in range(self.size):
            with open(f"{self.dir}/log/r{rank}.log", "wb") as out:
                self.procs.append(subprocess.Popen(
                    self.argv(rank, program), env=env, stdin=subprocess.DEVNULL,
                    stdout=out, stderr=subprocess.STDOUT))

    def died(self, expect_exit=False):
        """Raises if a broker exited (before the end, any exit is a failure)."""
        for rank, p in enumerate(self.procs):
            rc = p.poll()
            if rc is not None and (not expect_exit or rc != 0):
                raise BenchError(f"{self.name}: broker rank {rank} exited with {rc}:\n"
                                 + tail(f"{self.dir}/log/r{rank}.log", 20))

    def wait_file(self, name, timeout, what):
        path = f"{self.dir}/{name}"
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            self.died()
            if time.monotonic() > deadline:
                raise BenchError(f"{self.name}: timed out after {timeout:.0f} s waiting for {what} "
                                 f"(--timeout-scale raises the limit)\n" + self.diagnose())
            time.sleep(0.05)
        with open(path) as f:
            return f.read().split()

    def diagnose(self):
        """Which brokers rank 0 sees, and its log: for a timeout's message."""
        try:
            r = subprocess.run([f"{FLUX_PREFIX}/bin/flux", "overlay", "status", "--timeout=5s"],
                               env=dict(broker_env(), FLUX_URI=f"local://{self.dir}/r0/local"),
                               capture_output=True, text=True, timeout=30)
            lines = (r.stdout + r.stderr).splitlines()
        except subprocess.TimeoutExpired:
            lines = ["(no answer in 30 s)"]
        out = "rank 0's `flux overlay status`:\n" + "\n".join(f"  | {x}" for x in lines[:40])
        return out + "\nrank 0's log:\n" + tail(f"{self.dir}/log/r0.log", 20)

    def measure(self, program):
        cpu0 = cpu_times()
        t0 = time.time()
        self.launch(program)
        quorum = float(self.wait_file("quorum", self.timeouts["quorum"], "quorum (all brokers online)")[0])
        rc, start, end = self.wait_file("run", self.timeouts["run"], f"flux run -N{self.size} true")
        if rc != "0":
            raise BenchError(f"{self.name}: flux run -N{self.size} true (or the probes) exited "
                             f"with {rc}:\n" + tail(f"{self.dir}/run.out", 20)
                             + tail(f"{self.dir}/probe.err", 20))
        with open(f"{self.dir}/tree") as f:
            tree = f.read().split()
        if len(tree) != 2 or tree[0] != self.topo:
            raise BenchError(f"{self.name}: rank 0 reports tbon.topo and tbon.maxlevel {tree}, "
                             f"not topology {self.topo}")
        cpu, hwm = proc_sample(self.procs[0].pid)
        probe = {}
        if self.probes:
            with open(f"{self.dir}/probe") as f:
                k, probe_cpu, _, step_cpu = f.read().split()
            cpu -= float(step_cpu)
            per = float(probe_cpu) / int(k)
            probe = {"probe_ms": per * 1000, "probes_pct": per * self.size / 5 * 100}
        released = time.time()
        open(f"{self.dir}/release", "w").close()
        deadline = time.monotonic() + self.timeouts["shutdown"]
        while any(p.poll() is None for p in self.procs):
            self.died(expect_exit=True)
            if time.monotonic() > deadline:
                up = [r for r, p in enumerate(self.procs) if p.poll() is None]
                raise BenchError(f"{self.name}: timed out after {self.timeouts['shutdown']:.0f} s "
                                 f"waiting for the brokers to exit; still running: ranks "
                                 f"{hostlist_of_ranks(up)[len(HOST_PREFIX):]}\n"
                                 + tail(f"{self.dir}/log/r0.log", 20))
            time.sleep(0.05)
        done = time.time()
        self.died(expect_exit=True)
        other_processes(set())  # reaps orphans, whose CPU then counts as ours
        ours, machine = (b - a for a, b in zip(cpu0, cpu_times()))
        return {"depth": int(tree[1]), "quorum_s": quorum - t0, "run_s": float(end) - float(start),
                "rank0_cpu_s": cpu, "rank0_hwm_mib": hwm,
                "shutdown_s": done - released, "total_s": done - t0,
                "all_cpu_s": ours, "others_cpu_s": max(0.0, machine - ours), **probe}

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            p.wait()


def timeouts_for(size, scale):
    # Each broker's rc1 and rc3 are a Python `flux modprobe` (~0.3 CPU-s
    # each on this machine's 2 cores: N=32 reaches quorum in ~10 s, exits in
    # ~8 s); a few times that, so only a hung instance hits them.
    return {"quorum": scale * (60 + 1.5 * size), "run": scale * (60 + 0.5 * size),
            "shutdown": scale * (60 + 1.0 * size)}


# ------------------------------------------------------------------ output

def table(rows):
    head = ("N", "topo", "depth", "runs") + COLUMNS
    body = [[str(r["N"]), r["topo"], str(r["depth"]), str(r["runs"])]
            + [f"{r[c]:.2f}" if c != "rank0_hwm_mib" else f"{r[c]:.1f}" for c in COLUMNS]
            for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    fmt = "  ".join(f"{{:{'<' if i == 1 else '>'}{w}}}" for i, w in enumerate(widths))
    return "\n".join([fmt.format(*head)] + [fmt.format(*b) for b in body])


def write_csv(rows, path):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["N", "topo", "depth", "runs", *COLUMNS])
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in r.items()})


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise BenchError("--plot needs python3-matplotlib (scripts/install-deps)") from None
    panels = (("quorum_s", "launch -> quorum (s)"), ("run_s", "flux run -N<N> true (s)"),
              ("shutdown_s", "shutdown -> all exited (s)"), ("rank0_cpu_s", "rank 0 broker CPU (s)"),
              ("rank0_hwm_mib", "rank 0 broker peak RSS (MiB)"),
              ("all_cpu_s", "whole instance CPU, launch -> exit (s)"))
    fig, axes = plt.subplots(2, 3, figsize=(14, 7.5))
    topos = list(dict.fromkeys(r["topo"] for r in rows))
    sizes = sorted({r["N"] for r in rows})
    for ax, (col, title) in zip(axes.flat, panels):
        for topo in topos:
            pts = sorted((r["N"], r[col]) for r in rows if r["topo"] == topo)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=topo)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.set_ylim(0, 1.1 * max(r[col] for r in rows))
        ax.set_xlabel("brokers (N)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    axes.flat[0].legend(title="tbon.topo")
    fig.suptitle("Flux brokers on loopback, config bootstrap, CURVE cert from flux-curve-csi")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ------------------------------------------------------------------ main

def bench(args):
    check_private_namespace()
    scratch = setup_mounts(os.environ["FCC_TBON_FLUX_DIR"])
    try:
        rows = measure_all(args, scratch)
    finally:
        # The namespace's mounts die with it, but their mount point is a
        # directory on the host's /tmp; processes left by a failed run
        # (rc1 scripts of killed brokers) would keep the tmpfs busy.
        kill_all_others()
        subprocess.run(["umount", "-R", scratch], check=False)
        try:
            os.rmdir(scratch)
        except OSError as e:
            log(f"could not remove {scratch}: {e.strerror}")
    print(table(rows), flush=True)
    if args.csv:
        write_csv(rows, args.csv)
    if args.plot:
        plot(rows, args.plot)


def measure_all(args, scratch):
    check_flux_runs()
    raise_fd_limit()
    program = f"{scratch}/rank0-program"
    with open(program, "w") as f:
        f.write(INITIAL_PROGRAM)
    os.chmod(program, 0o755)
    with open(f"{scratch}/probe.py", "w") as f:
        f.write(PROBE_PROGRAM)
    global COLUMNS
    if args.probes:
        COLUMNS = COLUMNS + ("probe_ms", "probes_pct")

    driver = Driver(args, scratch)
    run = None
    rows = []
    try:
        driver.start()
        cert = None
        for size in args.sizes:
            rendered = render(args, size, scratch, program)
            toml_text, opts = start_script_parts(rendered)
            if cert is None:
                # The attributes the controller gives the Job's curve volume
                # (minicluster, owner); a fresh generation like a new MiniCluster.
                attrs = dict(curve_volume_attributes(rendered_job(rendered)),
                             generation=str(uuid.uuid4()))
                cert = driver.publish(attrs)
                vlog(f"published {NAMESPACE}/{attrs['minicluster']} (owner {attrs.get('owner')}): {cert}")
            keep = broker_options(opts)
            vlog(f"N={size}: flux start options rendered: {shlex.join(opts)}; kept: {shlex.join(keep)}")
            timeouts = timeouts_for(size, args.timeout_scale)
            for topo in args.topo:
                results = []
                for i in range(1, args.runs + 1):
                    text = loopback_toml(toml_text, size, cert, free_ports(size), topo)
                    if VERBOSE and i == 1 and (size, topo) == (args.sizes[0], args.topo[0]):
                        diff = difflib.unified_diff(toml_text.splitlines(), text.splitlines(),
                                                    "rendered broker.toml", "loopback broker.toml",
                                                    lineterm="")
                        sys.stderr.write("\n".join(diff) + "\n")
                    run = Run(args, scratch, size, topo, i, text, keep, timeouts)
                    try:
                        results.append(run.measure(program))
                    finally:
                        run.kill()
                    left = other_processes({driver.proc.pid})
                    if left:
                        raise BenchError(f"{run.name}: processes left after every broker exited: "
                                         + ", ".join(left[:10]))
                    m = results[-1]
                    log(f"{run.name}: depth {m['depth']}, "
                        + ", ".join(f"{c} {m[c]:.2f}" for c in COLUMNS))
                    run = None
                rows.append({"N": size, "topo": topo, "depth": results[0]["depth"],
                             "runs": len(results),
                             **{c: statistics.median(r[c] for r in results) for c in COLUMNS}})
    finally:
        if run:
            run.kill()
        driver.stop()
    return rows


def main():
    global VERBOSE
    args = parse_args(sys.argv[1:])
    VERBOSE = args.verbose
    inside = os.environ.get("FCC_TBON_STAGE") == "inside"
    if not inside and os.geteuid() != 0:
        if os.environ.get("FCC_REQUIRE_MOUNT_TESTS") == "1":
            log("needs root (mounts, in namespaces of its own)")
            return 1
        log("SKIP: needs root (mounts, in namespaces of its own)")
        return 77
    # Ctrl-C or a kill: unwind through the finally blocks (as init of the
    # PID namespace this script would otherwise ignore SIGTERM).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        if not inside:
            enter_namespaces(args)  # does not return
        bench(args)
    except BenchError as e:
        log(str(e))
        return 1
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
