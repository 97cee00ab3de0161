"""Helpers for the controller's end-to-end tests on the real control plane.

A test script calls `main(tests)`. Started by hand or by CTest without a
control plane, it re-runs itself under `scripts/controlplane run DIR` (a
fresh DIR), so etcd, kube-apiserver and kube-controller-manager are always
stopped at the end. Every wait is bounded; controllers started here die
with the test process (PR_SET_PDEATHSIG) and are stopped in `finally`.

Env: FCC_CONTROLLER (the minicluster-controller binary; CTest passes it),
FCC_KEEP=1 (keep the work dir on success too).
"""

import ctypes
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONTROLPLANE = os.path.join(REPO, "scripts", "controlplane")
CRD = os.path.join(REPO, "deploy", "controller", "crd.yaml")
API = "minicluster.dev/v1alpha1"


class Failure(Exception):
    pass


def log(msg):
    print(f"e2e: {msg}", flush=True)


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def check_eq(got, want, what):
    if got != want:
        raise Failure(f"{what}: got {json.dumps(got)}, want {json.dumps(want)}")


# ------------------------------------------------------------------ kubectl

def kubectl(*args, input=None, check_rc=True, timeout=60):
    r = subprocess.run(["kubectl", *args], input=input, capture_output=True,
                       text=True, timeout=timeout)
    if check_rc and r.returncode != 0:
        raise Failure(f"kubectl {' '.join(args)}: rc={r.returncode}: {r.stderr.strip()}")
    return r


def get(kind, name, ns=None, managed_fields=False):
    """The object as the API server stores it, or None if it does not exist."""
    args = ["get", kind, name, "-o", "json"]
    if ns:
        args += ["-n", ns]
    if managed_fields:
        args.append("--show-managed-fields")
    r = kubectl(*args, check_rc=False)
    if r.returncode != 0:
        if "NotFound" in r.stderr:
            return None
        raise Failure(f"kubectl get {kind} {name}: {r.stderr.strip()}")
    return json.loads(r.stdout)


def items(kind, ns, selector=None):
    args = ["get", kind, "-n", ns, "-o", "json"]
    if selector:
        args += ["-l", selector]
    return json.loads(kubectl(*args).stdout)["items"]


def apply(obj, *extra):
    text = obj if isinstance(obj, str) else json.dumps(obj)
    return kubectl("apply", *extra, "-f", "-", input=text)


def patch(kind, name, ns, body, subresource=None):
    args = ["patch", kind, name, "-n", ns, "--type=merge", "-p", json.dumps(body)]
    if subresource:
        args.append(f"--subresource={subresource}")
    kubectl(*args)


def wait_for(what, fn, timeout=60, interval=0.25):
    """Polls fn until it returns something truthy; returns it. Fails with
    `what` and fn's last value after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = fn()
        except Failure as e:
            last = f"<{e}>"
        if last and not (isinstance(last, str) and last.startswith("<")):
            return last
        if time.monotonic() > deadline:
            raise Failure(f"timed out after {timeout}s waiting for {what} (last: {str(last)[:300]})")
        time.sleep(interval)


def condition(obj, ctype):
    for c in (obj or {}).get("status", {}).get("conditions", []) or []:
        if c.get("type") == ctype:
            return c
    return None


def cond_true(obj, ctype):
    c = condition(obj, ctype)
    return bool(c) and c.get("status") == "True"


def install_crd():
    kubectl("apply", "--server-side", "-f", CRD)
    kubectl("wait", "--for=condition=Established", "crd/miniclusters.minicluster.dev",
            "--timeout=60s", timeout=90)


def create_namespace(ns):
    if get("namespace", ns) is None:  # tests may share one (minicluster-system)
        kubectl("create", "namespace", ns)
    wait_for(f"default ServiceAccount in {ns}",
             lambda: get("serviceaccount", "default", ns), timeout=60)


def service_account_kubeconfig(work, sa, ns, duration="1h"):
    """A kubeconfig (written in `work`) that acts as ServiceAccount `ns/sa`
    through a token from the TokenRequest API, as a pod of it would; its
    context's namespace is `ns`. Returns the path."""
    token = kubectl("create", "token", sa, "-n", ns, f"--duration={duration}").stdout.strip()
    token_file = os.path.join(work, f"{ns}-{sa}.token")
    with open(token_file, "w") as f:
        f.write(token + "\n")
    path = os.path.join(work, f"{ns}-{sa}.kubeconfig")
    with open(path, "w") as f:
        json.dump({"apiVersion": "v1", "kind": "Config", "current-context": sa,
                   "clusters": [{"name": "cp", "cluster": {
                       "server": os.environ["FCC_CP_APISERVER"],
                       "certificate-authority": os.path.join(os.environ["FCC_CP_DIR"], "pki", "ca.crt")}}],
                   "users": [{"name": sa, "user": {"tokenFile": token_file}}],
                   "contexts": [{"name": sa, "context": {"cluster": "cp", "user": sa, "namespace": ns}}]}, f)
    return path


def minicluster(name, ns, size=2, command=None, labels=None, **spec):
    obj = {"apiVersion": API, "kind": "MiniCluster",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"size": size, "image": "example.invalid/flux:e2e", **spec}}
    if command:
        obj["spec"]["command"] = command
    if labels:
        obj["metadata"]["labels"] = labels
    return obj


def job_pods(ns, job):
    return items("pods", ns, f"batch.kubernetes.io/job-name={job}")


def pod_index(pod):
    return int(pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])


def set_pod_status(ns, pod_name, phase, exit_code=0, ready=False):
    """Writes what a kubelet would through pods/status (no kubelet here)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if phase == "Running":
        state = {"running": {"startedAt": now}}
    else:
        state = {"terminated": {"exitCode": exit_code,
                                "reason": "Completed" if exit_code == 0 else "Error",
                                "startedAt": now, "finishedAt": now}}
    status = {"phase": phase, "startTime": now,
              "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                              "lastTransitionTime": now}],
              "containerStatuses": [{"name": "flux-broker", "image": "example.invalid/flux:e2e",
                                     "imageID": "", "ready": ready, "restartCount": 0,
                                     "started": phase == "Running", "state": state}]}
    patch("pod", pod_name, ns, {"status": status}, subresource="status")


# ------------------------------------------------------------- raw API access

class Api:
    """Direct HTTPS to the API server with the admin client cert, for
    concurrent requests (a kubectl process each would swamp 2 cores)."""

    def __init__(self, work):
        import base64
        with open(os.environ["KUBECONFIG"]) as f:
            text = f.read()
        if text.lstrip().startswith("{"):
            kc = json.loads(text)
        else:
            import yaml  # python3-yaml
            kc = yaml.safe_load(text)
        user = kc["users"][0]["user"]
        cluster = kc["clusters"][0]["cluster"]
        cert, key = os.path.join(work, "api.crt"), os.path.join(work, "api.key")
        for path, field in ((cert, "client-certificate-data"), (key, "client-key-data")):
            with open(path, "wb") as f:
                f.write(base64.b64decode(user[field]))
        os.chmod(key, 0o600)
        self.ctx = ssl.create_default_context(
            cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        self.ctx.load_cert_chain(cert, key)
        self.server = cluster["server"]

    def request(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=60) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")


# ------------------------------------------------------------------ watching

class Watcher:
    """`kubectl get --watch --output-watch-events -o json` in the background:
    every event as the API server sent it, in order (e.g. a Job's first
    ADDED event shows it as created), so short-lived objects and transient
    field values are seen too. ns=None watches all namespaces;
    managed_fields=True keeps metadata.managedFields in the events."""

    def __init__(self, kind, ns, work, managed_fields=False):
        self.events = []
        self.lock = threading.Lock()
        self.out = open(os.path.join(work, f"watch-{kind}-{ns or 'all'}.json"), "w")
        scope = ["-n", ns] if ns else ["-A"]
        extra = ["--show-managed-fields"] if managed_fields else []
        self.proc = subprocess.Popen(
            ["kubectl", "get", kind, *scope, "--watch", "--output-watch-events", *extra, "-o", "json"],
            stdout=subprocess.PIPE, stderr=self.out, text=True, preexec_fn=_die_with_parent)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        decoder = json.JSONDecoder()
        buf = ""
        for line in self.proc.stdout:
            self.out.write(line)
            buf += line
            while True:
                buf = buf.lstrip()
                try:
                    event, end = decoder.raw_decode(buf)
                except ValueError:
                    break
                buf = buf[end:]
                with self.lock:
                    self.events.append(event)

    def of(self, name):
        with self.lock:
            return [e for e in self.events if e["object"]["metadata"]["name"] == name]

    def snapshot(self):
        with self.lock:
            return list(self.events)

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        end_process(self.proc, timeout=10)
        self.thread.join(timeout=10)
        self.out.close()


# --------------------------------------------------------------- controller

def end_process(proc, sig=signal.SIGTERM, timeout=20):
    """Sends `sig` to a running child and waits; SIGKILL after `timeout`."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _die_with_parent():
    # If the test process dies (even by SIGKILL), so does the child.
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(metrics_url):
    """{series: value} from a controller's /metrics."""
    with urllib.request.urlopen(metrics_url, timeout=5) as r:
        check_eq(r.status, 200, f"GET {metrics_url}")
        text = r.read().decode()
    series = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            series[name] = float(value)
    return series


def reconciles_and_busy(metrics_url):
    """(reconciles finished, whatever their result; keys queued or being
    reconciled) by the controller's own counters."""
    m = scrape(metrics_url)
    done = sum(v for k, v in m.items() if k.startswith("controller_runtime_reconcile_total{"))
    busy = sum(v for k, v in m.items()
               if k.startswith(("workqueue_depth{", "controller_runtime_active_workers{")))
    return done, busy


def wait_reconciled(metrics_url, what, since, at_least=1, timeout=30):
    """Waits until the controller has finished `at_least` reconciles more
    than `since` and has nothing queued or running: what it would write
    about the objects that caused them is written (or logged) by then.
    Instead of a sleep before asserting that nothing was written, which on
    a loaded machine passes before the controller has seen the change."""
    def done():
        count, busy = reconciles_and_busy(metrics_url)
        return count >= since + at_least and busy == 0 and count
    return wait_for(f"{what}: {at_least} reconcile(s) after {since:.0f}, and an idle work queue",
                    done, timeout=timeout, interval=0.05)


def poke_and_wait_reconciled(metrics_url, kind, name, ns):
    """Annotates kind/name (a change the controller acts on with a reconcile
    that writes nothing) and waits until that reconcile has finished."""
    before, _ = reconciles_and_busy(metrics_url)
    kubectl("annotate", "--overwrite", kind, name, "-n", ns,
            f"e2e.minicluster.dev/poke={time.monotonic_ns()}")
    wait_reconciled(metrics_url, f"the poke of {kind} {ns}/{name}", before)


def wait_first_pass(metrics_url, what):
    """Waits until a controller just started has reconciled every MiniCluster
    there is (its initial list queues them all before any worker starts, so
    as many reconciles and an idle queue mean each has had its turn)."""
    out = kubectl("get", "miniclusters.minicluster.dev", "-A", "-o", "name").stdout
    wait_reconciled(metrics_url, what, 0, at_least=max(1, len(out.split())))


class Controller:
    """One minicluster-controller process, run as a developer would outside
    a cluster (--kubeconfig), with its log in the work dir."""

    all = []

    def __init__(self, work, name, *args, kubeconfig=None, wrapper=(), env=None):
        """kubeconfig "" means in-cluster config; `wrapper` is a command
        that ends by exec'ing its arguments (same pid: signals reach us)."""
        self.name = name
        self.log_path = os.path.join(work, f"controller-{name}.log")
        self.health_port = free_port()
        binary = os.environ["FCC_CONTROLLER"]
        if kubeconfig != "":
            args = ("--kubeconfig", kubeconfig or os.environ["KUBECONFIG"], *args)
        self.log_file = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [*wrapper, binary, "--log-level", "debug",
             "--health-addr", f"127.0.0.1:{self.health_port}", *args],
            stdout=self.log_file, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
            env=env)
        Controller.all.append(self)

    def alive(self):
        return self.proc.poll() is None

    def text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def count(self, pattern):
        return len(re.findall(pattern, self.text(), re.M))

    @property
    def metrics_url(self):
        return f"http://127.0.0.1:{self.health_port}/metrics"

    def metrics(self):
        return scrape(self.metrics_url)

    def reconciles(self):
        return reconciles_and_busy(self.metrics_url)[0]

    def actions(self):
        """Lines where this replica wrote to the API server for a MiniCluster."""
        return re.findall(r"^.* info minicluster \S+: (?:apply|create|set) .*$", self.text(), re.M)

    def healthz(self, path="/readyz"):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}{path}", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def wait_ready(self, timeout=60):
        wait_for(f"controller {self.name} /readyz", lambda: self.healthz() or not self.alive(),
                 timeout=timeout)
        check(self.alive(), f"controller {self.name} exited: {self.tail()}")

    def tail(self, n=40):
        return "\n".join(self.text().splitlines()[-n:])

    def kill(self, sig=signal.SIGTERM, timeout=20):
        end_process(self.proc, sig, timeout)
        self.log_file.close()
        return self.proc.returncode


def stop_all_controllers():
    for c in Controller.all:
        try:
            c.kill()
        except Exception:  # keep stopping the others
            pass


# --------------------------------------------------------------------- main

def _under_control_plane(needs_controller, node_images=None, admission_config=None, nodes=1):
    """Re-runs this script under `scripts/controlplane run` with a fresh dir;
    with `node_images` (OCI archives, pause first) on `nodes` real nodes, in a
    network and mount namespace of its own; with `admission_config` (an
    AdmissionConfiguration as a dict) passed to kube-apiserver."""
    if not os.environ.get("FCC_CONTROLLER"):
        default = os.path.join(REPO, "build", "src", "controller", "minicluster-controller")
        os.environ["FCC_CONTROLLER"] = default
    if needs_controller and not os.access(os.environ["FCC_CONTROLLER"], os.X_OK):
        print(f"e2e: no controller binary at {os.environ['FCC_CONTROLLER']} (set FCC_CONTROLLER)",
              file=sys.stderr)
        return 1
    work = tempfile.mkdtemp(prefix="fcc-e2e-" + os.path.basename(sys.argv[0]).split(".")[0] + ".")
    # SIGTERM (CTest timeout, Ctrl-C) reaches `controlplane run`, which stops
    # the plane; PDEATHSIG=SIGTERM covers our own death.
    def child_setup():
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)
    cmd = [CONTROLPLANE, "run", work, "--", sys.executable, *sys.argv]
    env = {**os.environ, "FCC_E2E_WORK": work}
    if admission_config is not None:
        path = os.path.join(work, "admission-config.json")
        with open(path, "w") as f:
            json.dump(admission_config, f, indent=1)
        env["FCC_CP_ADMISSION_CONFIG"] = path
    if node_images is not None:
        cmd = ["unshare", "--net", "--mount", "--propagation", "private",
               CONTROLPLANE, "run", work, "--node" if nodes == 1 else f"--nodes={nodes}", *cmd[3:]]
        env["FCC_NODE_IMAGES"] = ":".join(node_images)
    proc = subprocess.Popen(cmd, env=env, preexec_fn=child_setup)
    signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    signal.signal(signal.SIGINT, lambda *_: proc.terminate())
    rc = proc.wait()
    if rc == 0 and os.environ.get("FCC_KEEP") != "1":
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"e2e: work dir kept: {work} (controller logs, watches, control-plane logs)",
              file=sys.stderr)
    return rc


def main(tests, needs_controller=True, crd=True, node_images=None, setup=None,
         admission_config=None, nodes=1):
    """Runs `tests` (functions taking the work dir) on a control plane;
    `crd`: apply the MiniCluster CRD first; `node_images`: a callable giving
    the OCI archives for a real node (pause first), called before the
    cluster starts; `setup(work)`: run once before the tests;
    `admission_config`: an AdmissionConfiguration (dict) for kube-apiserver's
    admission plugins, e.g. a managed cluster's PodSecurity defaults;
    `nodes`: how many real nodes (with `node_images`)."""
    if "FCC_CP_DIR" not in os.environ:
        images = node_images() if node_images else None
        sys.exit(_under_control_plane(needs_controller, images, admission_config, nodes))
    work = os.environ.get("FCC_E2E_WORK") or os.environ["FCC_CP_DIR"]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    only = sys.argv[1:]
    passed, failed = 0, 0
    t0 = time.monotonic()
    try:
        if crd:
            install_crd()
        if setup:
            setup(work)
        for test in tests:
            if only and test.__name__ not in only:
                continue
            start = time.monotonic()
            try:
                test(work)
                passed += 1
                log(f"ok - {test.__name__} ({time.monotonic() - start:.1f}s)")
            except Exception as e:  # report and go on: tests use their own namespaces
                failed += 1
                log(f"FAIL - {test.__name__}: {e}")
                traceback.print_exc()
                for c in Controller.all:
                    print(f"--- tail of controller {c.name} log", file=sys.stderr)
                    print(c.tail(), file=sys.stderr)
            finally:
                stop_all_controllers()
                Controller.all.clear()
    finally:
        stop_all_controllers()
    log(f"{passed} passed, {failed} failed in {time.monotonic() - t0:.0f}s")
    sys.exit(1 if failed or not passed else 0)
