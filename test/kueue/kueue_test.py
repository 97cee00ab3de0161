#!/usr/bin/env python3
"""MiniClusters queued by real Kueue on the real control plane (issue 6).

Kueue's manager (sigs.k8s.io/kueue, pinned in test/kueue/tools/go.mod, built
by scripts/build-kueue) runs against etcd + kube-apiserver +
kube-controller-manager on loopback (scripts/controlplane run), with its
admission and CRD-conversion webhooks served on 127.0.0.1 (see
start_kueue). The real minicluster-controller binary runs next to it. The
queue objects and MiniClusters are the files in examples/kueue/, applied as
they are (docs/admin/kueue.md shows the same files).

  1. ClusterQueue of 8 CPU, three MiniClusters of 2 x 2 CPU: two admitted and
     Running, the third Queued with Kueue's reason; index 0 of one admitted
     Succeeded -> its Job completes (successPolicy, the real Job controller),
     Kueue releases the quota, the third is admitted.
  2. A persistent MiniCluster holds its quota until deleted; then the waiting
     one is admitted.
  3. An `urgent` (WorkloadPriorityClass) MiniCluster preempts one: Kueue
     suspends its Job, the controller never sets suspend back, the MiniCluster
     shows Queued (Preempted); it is admitted and starts again after the
     urgent one completes.
  4. A MiniCluster with its own nodeSelector and toleration, queued on a
     ResourceFlavor with nodeLabels and tolerations: Kueue merges the
     flavor's in at admission, its Workload keeps the MiniCluster's (what it
     restores on suspend), and the controller writes nothing to the Job.
  Throughout: every pod that ever exists belongs to one of the MiniClusters'
  Jobs (no cert-generator pod), and every change of a queued Job's
  spec.suspend after its creation was made by Kueue.

Every wait is bounded; on failure the objects and the Kueue, controller and
kube-controller-manager logs are printed and the work dir is kept.

  test/kueue/kueue_test.py      (FCC_CONTROLLER=path/to/minicluster-controller;
                                 FCC_KEEP=1 keeps the work dir on success;
                                 FCC_KUEUE_WORKLOAD_API=kueue.x-k8s.io/v1beta2
                                 runs the controller with that Workload API)
"""

import base64
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request

import yaml  # python3-yaml (scripts/install-deps)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "e2e"))
import e2e_lib  # noqa: E402
from e2e_lib import (Failure, Watcher, _die_with_parent, check, cond_true,  # noqa: E402
                     condition as cond, end_process, free_port, kubectl, wait_for)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(REPO, "examples", "kueue")
NS = "default"  # the namespace the examples use
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Field managers of Kueue's manager: the only ones allowed to change a queued
# Job's spec.suspend after the controller created it.
KUEUE_MANAGER = re.compile(r"^kueue")
T0 = time.monotonic()
WORKLOAD_API = os.environ.get("FCC_KUEUE_WORKLOAD_API", "")  # empty: the controller's default (v1beta1)


def log(msg):
    print(f"kueue: [{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


# ------------------------------------------------------------------ kubectl

def get(kind, name, ns=NS):
    return e2e_lib.get(kind, name, ns)


def items(kind, ns=NS, selector=None):
    return e2e_lib.items(kind, ns, selector)


def reasons(name):
    """Reasons of the events.k8s.io Events about MiniCluster `name`, oldest first."""
    out = kubectl("get", "events.events.k8s.io", "-n", NS, "-o", "json",
                  f"--field-selector=regarding.name={name},regarding.kind=MiniCluster").stdout
    evs = sorted(json.loads(out)["items"], key=lambda e: e["eventTime"])
    return [e["reason"] for e in evs]


def wait_reasons(name, want, timeout=30):
    wait_for(f"events {want} on MiniCluster {name}", lambda: reasons(name) == want, timeout)


APPLIED = set()  # example files applied, so the test can prove it used them all


def apply_example(fname, name=None):
    """kubectl apply one file of examples/kueue; with `name`, under that name
    (the same as `sed 's/^  name: X$/  name: NAME/' FILE | kubectl apply -f -`)."""
    path = os.path.join(EXAMPLES, fname)
    with open(path) as f:
        text = f.read()
    if name:
        text, n = re.subn(r"^(  name: )\S+$", rf"\g<1>{name}", text, count=1, flags=re.M)
        check(n == 1, f"{fname}: no metadata.name line")
    kubectl("apply", "-f", "-", input=text)
    APPLIED.add(fname)


# ------------------------------------------------------------------ processes

class Process:
    """A long-running process of the test (Kueue, the controller), logging
    to the work dir; killed with the test (PDEATHSIG) or in stop()."""

    def __init__(self, name, argv, work, health_url):
        self.name = name
        self.health_url = health_url
        self.log_path = os.path.join(work, f"{name}.log")
        self.log_file = open(self.log_path, "w")
        self.proc = subprocess.Popen(argv, stdout=self.log_file, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)

    def alive(self):
        return self.proc.poll() is None

    def healthy(self):
        check(self.alive(), f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
        try:
            with urllib.request.urlopen(self.health_url, timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    @property
    def metrics_url(self):  # the controller's: /metrics beside /readyz
        return self.health_url.rsplit("/", 1)[0] + "/metrics"

    def tail(self, n=60):
        return "\n".join(self.text().splitlines()[-n:])

    def stop(self, timeout=20):
        end_process(self.proc, timeout=timeout)
        self.log_file.close()


def openssl(*args, cwd):
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f"openssl {' '.join(args[:2])}: {r.stderr.strip()}")


def make_webhook_certs(d):
    """A CA and a serving cert for 127.0.0.1 (Kueue's webhook server; also its
    metrics server): the API server trusts the CA through caBundle."""
    os.makedirs(d, exist_ok=True)
    ec = ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]
    openssl("genpkey", *ec, "-out", "ca.key", cwd=d)
    openssl("req", "-x509", "-new", "-key", "ca.key", "-days", "30", "-subj", "/CN=kueue-webhook-test-ca",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
            "-out", "ca.crt", cwd=d)
    with open(os.path.join(d, "tls.ext"), "w") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n")
    openssl("genpkey", *ec, "-out", "tls.key", cwd=d)
    openssl("req", "-new", "-key", "tls.key", "-subj", "/CN=127.0.0.1", "-out", "tls.csr", cwd=d)
    openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "30", "-extfile", "tls.ext", "-out", "tls.crt", cwd=d)
    with open(os.path.join(d, "ca.crt"), "rb") as f:
        return base64.b64encode(f.read()).decode()


def wait_crds_established(names):
    # (Not `kubectl wait`: right after the create it can fail on a CRD that
    # has no status.conditions yet.)
    def established():
        got = {c["metadata"]["name"]: cond_true(c, "Established")
               for c in json.loads(kubectl("get", "crd", "-o", "json").stdout)["items"]}
        return all(got.get(n) for n in names)
    wait_for(f"CRDs Established: {', '.join(names)}", established, timeout=60)


def install_kueue(kueue_dir, work, port, ca_bundle):
    """Kueue's CRDs and webhook configurations from its module, pointed at
    https://127.0.0.1:PORT instead of the in-cluster Service (as Kueue's own
    kustomize patches point them at its Service)."""
    comp = os.path.join(kueue_dir, "config", "components")
    url = f"https://127.0.0.1:{port}"
    # CRDs: the ones Kueue's kustomization patches with a conversion webhook
    # (v1beta1 <-> v1beta2, storage v1beta2) get it here too. Only the patches
    # it lists: e.g. ResourceFlavor's is there but commented out (Kueue does
    # not convert it; its versions are the same schema).
    converted = set()
    with open(os.path.join(comp, "crd", "kustomization.yaml")) as f:
        patches = [p["path"] for p in yaml.safe_load(f).get("patches", [])]
    for p in patches:
        if os.path.basename(p).startswith("webhook_in_"):
            with open(os.path.join(comp, "crd", p)) as f:
                converted.add(yaml.safe_load(f)["metadata"]["name"])
    check(converted, f"no webhook_in_* patches in {comp}/crd/kustomization.yaml")
    crds = []
    bdir = os.path.join(comp, "crd", "bases")
    for p in sorted(os.listdir(bdir)):
        with open(os.path.join(bdir, p)) as f:
            crd = yaml.safe_load(f)
        if crd["metadata"]["name"] in converted:
            crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {"url": f"{url}/convert", "caBundle": ca_bundle}}}
        crds.append(crd)
    # Admission webhooks: Kueue's own kinds and batch/v1 Job, the one
    # integration enabled (the others' paths are not served, and a webhook
    # with failurePolicy Fail on an unserved path would block e.g. all pods).
    with open(os.path.join(comp, "webhook", "manifests.yaml")) as f:
        configs = [d for d in yaml.safe_load_all(f) if d]
    kept = []
    for c in configs:
        c["metadata"]["name"] = "kueue-" + c["metadata"]["name"]  # Kueue's namePrefix
        hooks = []
        for h in c["webhooks"]:
            path = h["clientConfig"]["service"]["path"]
            if "kueue-x-k8s-io" in path or path.endswith("-batch-v1-job"):
                h["clientConfig"] = {"url": url + path, "caBundle": ca_bundle}
                hooks.append(h)
                kept.append(path)
        c["webhooks"] = hooks
    check(any(p.endswith("mutate-batch-v1-job") for p in kept), f"no Job webhook among {kept}")
    manifest = os.path.join(work, "kueue-install.json")
    with open(manifest, "w") as f:
        json.dump({"apiVersion": "v1", "kind": "List", "items": crds + configs}, f)
    kubectl("create", "namespace", "kueue-system")
    # Server-side: the Workload CRD is too big for the last-applied annotation.
    kubectl("apply", "--server-side", "--field-manager=kueue-install", "-f", manifest, timeout=120)
    wait_crds_established([c["metadata"]["name"] for c in crds])
    log(f"Kueue: {len(crds)} CRDs ({len(converted)} with the conversion webhook), "
        f"{len(kept)} admission webhooks on {url}")


def start_kueue(kueue_dir, work):
    """Kueue's manager as a developer would run it outside a cluster.

    Webhooks are served, on loopback: the API server calls them at
    https://127.0.0.1:PORT with a caBundle made here. Kueue's CRDs convert
    between v1beta1 and v1beta2 only through its /convert webhook, and its
    Job webhook is what Kueue relies on to suspend and validate queued Jobs,
    so leaving them out would test something Kueue does not support.
    internalCertManagement is off (it issues certs for the in-cluster
    Service name, which loopback cannot use); leader election off; metrics,
    health and webhooks on 127.0.0.1; the visibility API server off.

    With internalCertManagement off, Kueue reads its metrics serving cert
    from the fixed path /etc/kueue/metrics/certs; rather than write to the
    host's /etc, Kueue runs in a private mount namespace whose /etc is an
    overlay (tmpfs upper) holding that cert."""
    certs = os.path.join(work, "kueue-certs")
    ca_bundle = make_webhook_certs(certs)
    ports = {"webhook": free_port(), "health": free_port(), "metrics": free_port()}
    install_kueue(kueue_dir, work, ports["webhook"], ca_bundle)
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['health']}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports['metrics']}"},
        "webhook": {"host": "127.0.0.1", "port": ports["webhook"], "certDir": certs},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        # Workloads carry the Job's MiniCluster label, so the controller
        # can watch only those (--workload-label-selector, docs/admin/kueue.md).
        "integrations": {"frameworks": ["batch/job"],
                         "labelKeysToCopy": ["minicluster.dev/name"]},
        "featureGates": {"VisibilityOnDemand": False},
    }
    cfg_path = os.path.join(work, "kueue-config.yaml")
    with open(cfg_path, "w") as f:
        yaml.safe_dump(config, f)
    ovl = os.path.join(work, "kueue-etc")
    os.makedirs(ovl, exist_ok=True)
    script = r'''set -e
mount -t tmpfs -o size=1m,mode=0700 kueue-etc "$1"
mkdir "$1/upper" "$1/work"
mount -t overlay kueue-etc -o "lowerdir=/etc,upperdir=$1/upper,workdir=$1/work" /etc
mkdir -p /etc/kueue/metrics/certs
cp "$2/tls.crt" "$2/tls.key" /etc/kueue/metrics/certs/
shift 2
exec "$@"'''
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", ovl, certs,
            os.path.join(kueue_dir, "kueue"), f"--config={cfg_path}",
            f"--kubeconfig={os.environ['KUBECONFIG']}", "--zap-log-level=2"]
    t = time.monotonic()
    kueue = Process("kueue", argv, work, f"http://127.0.0.1:{ports['health']}/readyz")
    wait_for("Kueue /readyz", kueue.healthy, timeout=120)
    ready = time.monotonic() - t
    # Ready means its webhooks answer: a v1beta1 read goes through /convert.
    wait_for("Kueue's conversion webhook", lambda: kubectl(
        "get", "workloads.v1beta1.kueue.x-k8s.io", "-A", check_rc=False).returncode == 0, timeout=30)
    log(f"Kueue manager ready in {ready:.1f}s (webhooks :{ports['webhook']}, health :{ports['health']})")
    return kueue


def start_controller(work):
    binary = os.environ["FCC_CONTROLLER"]
    port = free_port()
    kubectl("apply", "--server-side", "-f", os.path.join(REPO, "deploy", "controller", "crd.yaml"))
    wait_crds_established(["miniclusters.minicluster.dev"])
    # The binary's default Workload API (v1beta1, read through Kueue's
    # conversion webhook); deploy/controller passes v1beta2, which the node
    # tests run. FCC_KUEUE_WORKLOAD_API overrides.
    api = ["--kueue-workload-api", WORKLOAD_API] if WORKLOAD_API else []
    # Only MiniClusters' Workloads (Kueue copies the label, start_kueue).
    c = Process("controller", [binary, "--kubeconfig", os.environ["KUBECONFIG"], "--log-level", "debug",
                               "--health-addr", f"127.0.0.1:{port}", *api,
                               "--workload-label-selector", "minicluster.dev/name"],
                work, f"http://127.0.0.1:{port}/readyz")
    wait_for("minicluster-controller /readyz", c.healthy, timeout=60)
    log("minicluster-controller ready")
    return c


# ------------------------------------------------------------------ the scenario

def mc(name):
    return get("miniclusters.minicluster.dev", name)


def job(name):
    return get("job", name)


def workload_of(name):
    """The Workload Kueue made for the MiniCluster's Job (owner reference)."""
    j = job(name)
    if not j:
        return None
    for w in items("workloads.kueue.x-k8s.io"):
        for ref in w["metadata"].get("ownerReferences", []):
            if ref.get("kind") == "Job" and ref.get("uid") == j["metadata"]["uid"]:
                return w
    return None


def state(name):
    m = mc(name)
    return (m or {}).get("status", {}).get("state")


def admitted_running(name):
    """Kueue admitted it, the Job runs, and the MiniCluster says so."""
    m, j = mc(name), job(name)
    if not m or not j or j["spec"].get("suspend") is not False:
        return False
    st = m.get("status", {})
    wl = st.get("workload", {})
    return (st.get("state") == "Running" and wl.get("admitted") is True
            and wl.get("clusterQueue") == "cluster-queue" and cond_true(m, "Running"))


def queued_for_quota(name):
    """Suspended, its Workload without quota, and Kueue's words on the
    MiniCluster (both in status.workload and in the Queued condition)."""
    m, j, w = mc(name), job(name), workload_of(name)
    if not m or not j or not w or j["spec"].get("suspend") is not True:
        return False
    qr = cond(w, "QuotaReserved")
    if not qr or qr["status"] != "False" or "insufficient unused quota" not in qr.get("message", ""):
        return False
    st = m.get("status", {})
    c = cond(m, "Queued")
    return (st.get("state") == "Queued" and st.get("workload", {}).get("admitted") is False
            and st["workload"].get("message") == qr["message"]
            and c and c["status"] == "True" and c["reason"] == qr["reason"] and c["message"] == qr["message"])


def show(*names):
    """What a user sees: the MiniClusters and Workloads, and the status of NAMES."""
    out = kubectl("get", "miniclusters,workloads.kueue.x-k8s.io", "-n", NS).stdout
    for n in names:
        out += f"--- minicluster {n} status:\n" + yaml.safe_dump({"status": mc(n)["status"]}, sort_keys=False)
    print(re.sub(r"^", "    | ", out.rstrip(), flags=re.M), flush=True)


def job_pods(name):
    return items("pods", selector=f"batch.kubernetes.io/job-name={name}")


def now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def set_pod(pod, phase):
    """What a kubelet writes to pods/status when the broker runs (Running,
    Ready) or exits 0 (Succeeded)."""
    t = now()
    running = phase == "Running"
    statuses = [{"name": c["name"], "image": c["image"], "imageID": "", "restartCount": 0,
                 "ready": running, "started": running,
                 "state": {"running": {"startedAt": t}} if running else
                          {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": t, "finishedAt": t}}}
                for c in pod["spec"]["containers"]]
    ready = "True" if running else "False"
    body = {"status": {"phase": phase, "startTime": t, "conditions": [
        {"type": "Initialized", "status": "True", "lastTransitionTime": t},
        {"type": "ContainersReady", "status": ready, "lastTransitionTime": t},
        {"type": "Ready", "status": ready, "lastTransitionTime": t}],
        "containerStatuses": statuses}}
    kubectl("patch", "pod", pod["metadata"]["name"], "-n", NS, "--subresource=status", "--type=merge",
            "-p", json.dumps(body))


def run_pods(name, size=2):
    """Wait for the Job controller's pods of a started MiniCluster, mark them
    Running and Ready, and see the MiniCluster count them."""
    pods = wait_for(f"{size} pods of Job {name}",
                    lambda: (lambda p: p if len(p) == size else None)(
                        [p for p in job_pods(name) if not p["metadata"].get("deletionTimestamp")]))
    for p in pods:
        set_pod(p, "Running")
    want = f"{size} of {size} broker pods active, {size} ready"
    wait_for(f"MiniCluster {name} status '{want}'",
             lambda: cond(mc(name), "Running") and cond(mc(name), "Running")["message"] == want)


def finish(name):
    """Index 0 (rank 0) exits 0: the Job completes through successPolicy and
    the MiniCluster shows Succeeded."""
    pod0 = [p for p in job_pods(name)
            if p["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index") == "0"]
    check(len(pod0) == 1, f"Job {name}: {len(pod0)} pods of index 0")
    set_pod(pod0[0], "Succeeded")
    wait_for(f"Job {name} Complete", lambda: cond_true(job(name), "Complete"))
    check(cond_true(job(name), "SuccessCriteriaMet"), f"Job {name} completed without SuccessCriteriaMet")
    wait_for(f"MiniCluster {name} Succeeded", lambda: state(name) == "Succeeded")
    wait_for(f"Kueue marks the Workload of {name} Finished", lambda: cond_true(workload_of(name), "Finished"))


# A ResourceFlavor for dedicated nodes: Kueue merges its nodeLabels and
# tolerations into an admitted Job's pod template (pkg/podset Merge).
FLAVOR_LABELS = {"cloud.example.com/pool": "hpc"}
FLAVOR_TOLERATION = {"key": "pool", "operator": "Equal", "value": "hpc", "effect": "NoSchedule"}
USER_TOLERATION = {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}


def flavor_merge(controller):
    """A MiniCluster's own nodeSelector and tolerations meet a flavor's: Kueue
    merges them at admission, its Workload keeps the MiniCluster's (what it
    restores on suspend), and the controller never writes the Job again."""
    queue = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "hpc-pool"},
         "spec": {"nodeLabels": FLAVOR_LABELS, "tolerations": [FLAVOR_TOLERATION]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "hpc-queue"},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{
             "coveredResources": ["cpu", "memory"],
             "flavors": [{"name": "hpc-pool", "resources": [{"name": "cpu", "nominalQuota": 4},
                                                            {"name": "memory", "nominalQuota": "4Gi"}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "hpc", "namespace": NS}, "spec": {"clusterQueue": "hpc-queue"}},
    ]
    for obj in queue:
        kubectl("apply", "-f", "-", input=json.dumps(obj))
    wait_for("ClusterQueue hpc-queue Active", lambda: cond_true(get("clusterqueue", "hpc-queue", ns=""), "Active"))
    kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "minicluster.dev/v1alpha1", "kind": "MiniCluster",
        "metadata": {"name": "placed", "namespace": NS, "labels": {QUEUE_LABEL: "hpc"}},
        "spec": {"size": 2, "image": "fluxrm/flux-sched:bookworm", "command": ["true"],
                 "resources": {"requests": {"cpu": "1", "memory": "256Mi"}},
                 "nodeSelector": {"disk": "ssd"}, "tolerations": [USER_TOLERATION],
                 "podLabels": {"team": "physics"}}}))

    def admitted():
        m, j = mc("placed"), job("placed")
        return (m and j and j["spec"].get("suspend") is False and state("placed") == "Running"
                and m["status"].get("workload", {}).get("clusterQueue") == "hpc-queue" and j)
    j = wait_for("placed admitted on flavor hpc-pool", admitted, timeout=90)
    pod = j["spec"]["template"]
    check(pod["spec"].get("nodeSelector") == {"disk": "ssd", **FLAVOR_LABELS},
          f"nodeSelector after admission: {pod['spec'].get('nodeSelector')}")
    check(pod["spec"].get("tolerations") == [USER_TOLERATION, FLAVOR_TOLERATION],
          f"tolerations after admission: {pod['spec'].get('tolerations')}")
    check(pod["metadata"]["labels"].get("team") == "physics", f"pod labels: {pod['metadata']['labels']}")
    ps = workload_of("placed")["spec"]["podSets"][0]["template"]["spec"]
    check(ps.get("nodeSelector") == {"disk": "ssd"} and ps.get("tolerations") == [USER_TOLERATION],
          f"the Workload's pod set (what Kueue restores on suspend) is not the MiniCluster's: {ps}")
    run_pods("placed")
    for p in job_pods("placed"):
        check(p["spec"].get("nodeSelector") == {"disk": "ssd", **FLAVOR_LABELS},
              f"pod {p['metadata']['name']} nodeSelector {p['spec'].get('nodeSelector')}")
    gen = job("placed")["metadata"]["generation"]
    # The controller has reconciled the admitted Job, pods and all.
    e2e_lib.poke_and_wait_reconciled(controller.metrics_url, "job", "placed", NS)
    writes = re.findall(r"minicluster default/placed: ((?:create|apply|set) Job.*)$", controller.text(), re.M)
    check(writes == ["create Job"], f"the controller's Job writes for placed: {writes}")
    check(job("placed")["metadata"]["generation"] == gen, "the admitted Job placed changed")
    log("ok - placed admitted on flavor hpc-pool: nodeSelector and tolerations = the MiniCluster's + the "
        "flavor's; the Workload keeps the MiniCluster's; the controller only created the Job")
    finish("placed")


def scenario(work, kueue, controller, pods_watch, jobs_watch):
    # --- queues
    for f in ("resource-flavor.yaml", "cluster-queue.yaml", "local-queue.yaml", "workload-priority-class.yaml"):
        apply_example(f)
    wait_for("ClusterQueue cluster-queue Active",
             lambda: cond_true(get("clusterqueue", "cluster-queue", ns=""), "Active"), timeout=60)
    wait_for("LocalQueue user-queue Active", lambda: cond_true(get("localqueue", "user-queue"), "Active"))
    log("ok - ResourceFlavor, ClusterQueue (8 CPU), LocalQueue user-queue, WorkloadPriorityClass urgent")

    # --- 1. three MiniClusters of 4 CPU in an 8 CPU queue
    names = ["queued-a", "queued-b", "queued-c"]
    for n in names:
        apply_example("minicluster-queued.yaml", name=n)
        time.sleep(1)  # distinct creation times: Kueue's FIFO order is the order created

    def two_admitted_one_queued():
        adm = [n for n in names if admitted_running(n)]
        waiting = [n for n in names if n not in adm and queued_for_quota(n)]
        return (adm, waiting[0]) if len(adm) == 2 and len(waiting) == 1 else None
    admitted, waiting = wait_for("two MiniClusters admitted and Running, one Queued with Kueue's reason",
                                 two_admitted_one_queued, timeout=120)
    m = mc(waiting)
    log(f"ok - admitted {admitted}; {waiting} Queued: reason {m['status']['workload']['reason']!r}, "
        f"message {m['status']['workload']['message']!r}")
    show(waiting, admitted[0])
    check(not job_pods(waiting), f"the queued Job {waiting} has pods")
    for n in admitted:
        run_pods(n)
    time.sleep(3)  # the queue stays as it is while both run
    check(queued_for_quota(waiting), f"{waiting} did not stay Queued while the quota was used")
    log("ok - admitted MiniClusters Running with 2 of 2 pods ready; the third stays Queued")

    first, second = admitted
    finish(first)
    wait_for(f"{waiting} admitted after {first} finished", lambda: admitted_running(waiting), timeout=90)
    run_pods(waiting)
    log(f"ok - index 0 of {first} Succeeded -> Job Complete, Workload Finished, {waiting} admitted and Running")
    wait_reasons(first, ["Queued", "Admitted", "Completed"])
    wait_reasons(waiting, ["Queued", "Admitted"])
    log(f"ok - events: {first} Queued, Admitted, Completed; {waiting} Queued, Admitted")

    # --- 2. a persistent MiniCluster holds its quota until deleted
    finish(second)  # frees 4 CPU for the persistent one
    apply_example("minicluster-persistent.yaml")
    wait_for("persistent MiniCluster interactive admitted", lambda: admitted_running("interactive"), timeout=90)
    run_pods("interactive")
    apply_example("minicluster-queued.yaml", name="queued-d")
    wait_for("queued-d Queued for quota", lambda: queued_for_quota("queued-d"), timeout=60)
    time.sleep(10)
    check(admitted_running("interactive") and queued_for_quota("queued-d"),
          "interactive no longer holds its quota, or queued-d left the queue, while nothing finished")
    check(not cond_true(job("interactive"), "Complete"), "the persistent MiniCluster's Job completed")
    log("ok - persistent MiniCluster interactive Running holds its quota (queued-d waits 10 s)")
    kubectl("delete", "miniclusters.minicluster.dev", "interactive", "-n", NS, "--wait=false")
    wait_for("queued-d admitted after interactive was deleted", lambda: admitted_running("queued-d"), timeout=90)
    run_pods("queued-d")
    wait_for("interactive's Job and Workload garbage-collected",
             lambda: job("interactive") is None and not [
                 w for w in items("workloads.kueue.x-k8s.io") if "interactive" in w["metadata"]["name"]])
    log("ok - interactive deleted -> its Job and Workload gone, queued-d admitted and Running")

    # --- 3. preemption by an urgent MiniCluster
    low = [waiting, "queued-d"]
    apply_example("minicluster-urgent.yaml")
    wait_for("urgent admitted (by preempting one)", lambda: admitted_running("urgent"), timeout=120)
    preempted = [n for n in low if job(n)["spec"]["suspend"] is True]
    check(len(preempted) == 1, f"want one of {low} preempted, suspended Jobs: {preempted}")
    victim = preempted[0]
    survivor = [n for n in low if n != victim][0]
    check(admitted_running(survivor), f"{survivor} should still run")

    def victim_queued():
        m, w = mc(victim), workload_of(victim)
        c = cond(m, "Queued")
        return (m and w and m["status"]["state"] == "Queued" and c and c["status"] == "True"
                and m["status"]["workload"]["admitted"] is False
                and cond_true(w, "Evicted") and cond(w, "Evicted")["reason"] == "Preempted"
                and c["reason"] == "Preempted")
    wait_for(f"MiniCluster {victim} Queued with reason Preempted", victim_queued, timeout=60)
    wait_for(f"pods of preempted {victim} deleted", lambda: not job_pods(victim), timeout=60)
    m = mc(victim)
    log(f"ok - urgent admitted; {victim} preempted: Job suspended, pods deleted, MiniCluster Queued "
        f"({cond(m, 'Queued')['reason']}: {cond(m, 'Queued')['message']!r})")
    show(victim)
    run_pods("urgent")
    # The controller does not fight Kueue: for 15 s the Job stays suspended and
    # unchanged (no write bumps its generation), the MiniCluster stays Queued.
    gen = job(victim)["metadata"]["generation"]
    end = time.monotonic() + 15
    while time.monotonic() < end:
        j = job(victim)
        check(j["spec"]["suspend"] is True and j["metadata"]["generation"] == gen,
              f"the preempted Job {victim} changed: suspend={j['spec']['suspend']}, "
              f"generation {gen} -> {j['metadata']['generation']}")
        check(state(victim) == "Queued", f"{victim} left Queued while preempted: {state(victim)}")
        time.sleep(0.5)
    log(f"ok - for 15 s the preempted Job {victim} stays suspended (generation {gen}), MiniCluster Queued")
    finish("urgent")
    wait_for(f"{victim} re-admitted after urgent finished", lambda: admitted_running(victim), timeout=90)
    run_pods(victim)
    log(f"ok - urgent Succeeded -> {victim} re-admitted, new pods, Running again")
    # Both candidates were admitted once before the preemption.
    victim_events = ["Queued", "Admitted", "Preempted", "Admitted"]
    wait_reasons(victim, victim_events)
    log(f"ok - events of {victim}: {victim_events}")
    for n in (victim, survivor):
        finish(n)
    log("ok - the remaining MiniClusters completed")

    # --- 4. the MiniCluster's placement meets a flavor's
    flavor_merge(controller)

    # --- invariants over everything the watches saw
    check(pods_watch.alive() and jobs_watch.alive(), "a watch ended early")
    jobs = set(names + ["queued-d", "interactive", "urgent", "placed"])
    uids = {}
    for e in jobs_watch.snapshot():
        o = e["object"]
        uids[o["metadata"]["uid"]] = o["metadata"]["name"]
    pods_seen = {}
    for e in pods_watch.snapshot():
        p = e["object"]
        owners = [(r["kind"], r["name"], r["uid"]) for r in p["metadata"].get("ownerReferences", [])]
        pods_seen[p["metadata"]["namespace"] + "/" + p["metadata"]["name"]] = owners
    check(pods_seen, "the pod watch saw no pods")
    for pod, owners in pods_seen.items():
        check(len(owners) == 1 and owners[0][0] == "Job" and owners[0][1] in jobs
              and uids.get(owners[0][2]) == owners[0][1],
              f"pod {pod} is not a pod of a MiniCluster's Job: owners {owners}")
    log(f"ok - all {len(pods_seen)} pods ever created belong to the MiniClusters' Jobs (no other pod)")

    # Who changed spec.suspend: after each Job's creation, only Kueue.
    changes = 0
    last = {}
    for e in jobs_watch.snapshot():
        o = e["object"]
        uid, susp = o["metadata"]["uid"], o["spec"].get("suspend")
        if e["type"] == "ADDED" and uid not in last:
            check(susp is True, f"Job {o['metadata']['name']} created with suspend={susp}")
        elif uid in last and susp != last[uid]:
            owner = [mf["manager"] for mf in o["metadata"].get("managedFields", [])
                     if "f:suspend" in mf.get("fieldsV1", {}).get("f:spec", {})]
            check(len(owner) == 1 and KUEUE_MANAGER.match(owner[0]),
                  f"Job {o['metadata']['name']}: suspend {last[uid]} -> {susp} by {owner}, not Kueue")
            changes += 1
        last[uid] = susp
    # 8 admissions (a, b, c, interactive, d, urgent, the victim again, placed) and one preemption.
    check(changes >= 9, f"only {changes} changes of spec.suspend seen, want at least 9")
    log(f"ok - all {changes} changes of a Job's spec.suspend were made by Kueue; "
        f"the controller only created Jobs suspended")

    # Kueue's webhooks took part: the API server called its Job webhooks for
    # the controller's creates and the /convert webhook for the controller's
    # v1beta1 Workload reads; Kueue logged no error.
    metrics = kubectl("get", "--raw", "/metrics").stdout

    def calls(pattern):
        return sum(float(m.group(1)) for m in re.finditer(pattern + r".* (\S+)$", metrics, re.M))
    for hook in ("mjob.kb.io", "vjob.kb.io", "mworkload.kb.io", "vclusterqueue.kb.io"):
        n = calls(r'^apiserver_admission_webhook_admission_duration_seconds_count\{[^}]*name="' + re.escape(hook) + '"')
        check(n > 0, f"the API server never called Kueue's webhook {hook}")
    n = calls(r'^apiserver_crd_conversion_webhook_duration_seconds_count\{[^}]*crd_name="workloads.kueue.x-k8s.io"'
              r'[^}]*succeeded="true"')
    check(n > 0 or WORKLOAD_API.endswith("/v1beta2"),
          "the API server never converted a Workload through Kueue's webhook")
    # Not errors of ours: no cluster-autoscaler here; and Kueue's own race when
    # the garbage collector deletes the deleted MiniCluster's Job and Workload
    # together (it suspends a Job whose Workload is gone and finds the Job gone
    # too: seen once in about ten CI runs).
    benign = ("Provisioning Requests not supported", 'suspend: jobs.batch \\"interactive\\" not found')
    errors = [line for line in kueue.text().splitlines() if '"level":"error"' in line
              and not any(b in line for b in benign)]
    check(not errors, f"Kueue logged {len(errors)} errors, e.g. {errors[:3]}")
    log(f"ok - the API server called Kueue's Job, Workload and ClusterQueue webhooks and converted "
        f"Workloads through it ({n:.0f}); no error in Kueue's log")

    # Every queue and MiniCluster example file was applied as it is (but
    # topology.yaml: Topology-Aware Scheduling needs nodes, and
    # test/node/multinode_node_test.py applies it on three).
    files = {f for f in os.listdir(EXAMPLES) if f.endswith(".yaml")
             and f not in ("kustomization.yaml", "topology.yaml")}
    check(files <= APPLIED, f"examples not exercised: {sorted(files - APPLIED)}")
    log(f"ok - every file of examples/kueue applied ({len(files)})")


def dump(work, procs):
    print("==== objects", file=sys.stderr)
    print(kubectl("get", "pods", "-A", "-o", "wide", check_rc=False).stdout, file=sys.stderr)
    for kind in ("miniclusters", "jobs", "workloads.kueue.x-k8s.io"):
        r = kubectl("get", kind, "-A", "-o", "yaml", check_rc=False)
        # Without managedFields, to keep it readable.
        print(re.sub(r"\n( *)managedFields:\n(\1[ -].*\n)*", "\n", r.stdout) or r.stderr, file=sys.stderr)
    r = kubectl("get", "clusterqueue", "cluster-queue", "-o", "yaml", check_rc=False)
    print(r.stdout or r.stderr, file=sys.stderr)
    for p in procs:
        print(f"==== tail of {p.name} log ({p.log_path})", file=sys.stderr)
        print(p.tail(80), file=sys.stderr)
    kcm = os.path.join(os.environ["FCC_CP_DIR"], "logs", "kube-controller-manager.log")
    print(f"==== tail of {kcm}", file=sys.stderr)
    with open(kcm, errors="replace") as f:
        print("".join(f.readlines()[-30:]), file=sys.stderr)


def inside(kueue_dir):
    work = os.environ["FCC_KUEUE_WORK"]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    procs, watches = [], []
    ok = False
    try:
        kueue = start_kueue(kueue_dir, work)
        procs.append(kueue)
        controller = start_controller(work)
        procs.append(controller)
        pods_watch, jobs_watch = Watcher("pods", None, work, managed_fields=True), Watcher("jobs", None, work, managed_fields=True)
        watches += [pods_watch, jobs_watch]
        time.sleep(1)  # let the watches connect before anything is created
        scenario(work, kueue, controller, pods_watch, jobs_watch)
        for p in procs:
            check(p.alive(), f"{p.name} exited during the scenario")
        ok = True
    except Exception as e:
        log(f"FAIL: {e}")
        traceback.print_exc()
        try:
            dump(work, procs)
        except Exception as d:  # keep stopping things
            log(f"(dump failed: {d})")
    finally:
        for w in watches:
            w.stop()
        for p in reversed(procs):
            p.stop()
    log(f"{1 if ok else 0} passed, {0 if ok else 1} failed in {time.monotonic() - T0:.0f}s")
    return 0 if ok else 1


def main():
    if "FCC_CP_DIR" in os.environ and "FCC_KUEUE_WORK" in os.environ:
        return inside(os.environ["FCC_KUEUE_DIR"])
    controller = os.environ.get("FCC_CONTROLLER") or os.path.join(
        REPO, "build", "src", "controller", "minicluster-controller")
    if not os.access(controller, os.X_OK):
        print(f"kueue: no controller binary at {controller} (set FCC_CONTROLLER)", file=sys.stderr)
        return 1
    t = time.monotonic()
    r = subprocess.run([os.path.join(REPO, "scripts", "build-kueue")], stdout=subprocess.PIPE, text=True)
    if r.returncode != 0:
        print("kueue: scripts/build-kueue failed", file=sys.stderr)
        return 1
    kueue_dir = r.stdout.strip().splitlines()[-1]
    log(f"Kueue from {kueue_dir} ({time.monotonic() - t:.1f}s to build or find)")
    work = tempfile.mkdtemp(prefix="fcc-kueue.")
    env = {**os.environ, "FCC_KUEUE_WORK": work, "FCC_KUEUE_DIR": kueue_dir, "FCC_CONTROLLER": controller}

    def child_setup():
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # `controlplane run` stops the plane
    proc = subprocess.Popen([os.path.join(REPO, "scripts", "controlplane"), "run", work, "--",
                             sys.executable, os.path.abspath(__file__)], env=env, preexec_fn=child_setup)
    signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    signal.signal(signal.SIGINT, lambda *_: proc.terminate())
    rc = proc.wait()
    if rc == 0 and os.environ.get("FCC_KEEP") != "1":
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"kueue: work dir kept: {work} (kueue.log, controller.log, watch-*.json, logs/)", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
