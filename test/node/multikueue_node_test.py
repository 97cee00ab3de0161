#!/usr/bin/env python3
"""Kueue's MultiKueue runs MiniClusters of a manager cluster on a worker
(issue 31, docs/admin/multikueue.md).

Two clusters in the test's own network namespace. The WORKER is the one
`scripts/controlplane run --node` starts for the test (the real node): the
project installed from deploy/multikueue/worker (the controller in its
--multikueue-worker role), Kueue (test/kueue's start_kueue, on loopback),
examples/multikueue/worker-access.yaml and worker.yaml (its ClusterQueue's
CPU quota scaled to fit exactly `eph` and `pers` below: 500m). The MANAGER
is a second control plane (`scripts/controlplane start`, no node) with
Kueue, deploy/multikueue/manager applied (CRD, RBAC, admission policies;
its Deployment cannot run without a node, so the controller runs here as a
process with its ServiceAccount's token), examples/multikueue/manager.yaml
and the Secret made by deploy/multikueue/worker-kubeconfig. MiniClusters
are created on the manager only; pods run the Flux test image. One flow:

  1. `eph` (ephemeral, size 3, `flux run -N3 hostname`) and `pers`
     (persistent, size 2) run on the worker; `third` (ephemeral, size 2)
     stays Queued on the manager, with no Job or pod on the worker, while
     its Workload waits there for quota
  2. the worker's Service of `pers` is owned by the worker's Job and
     carries the origin label (its NetworkPolicy too); `kubectl exec` into
     its index 0 on the worker runs `flux run -N2 hostname` on both
  3. index 0 of `eph` prints the three hostnames (its log followed on the
     worker: MultiKueue deletes the worker's Job as soon as the manager's
     Workload finishes); the manager's MiniCluster ends Succeeded naming
     the worker (status.workload.clusterName); then the worker's Job,
     Service, NetworkPolicy and pods of `eph` are gone, nothing mounted
  4. `third` then runs on the worker and Succeeds on the manager
  5. a hand-made pod on the worker mounting `pers`'s curve volume is
     refused by the admission policy
  6. deleting `pers` on the manager removes its Job, Service, pods and
     mounts on the worker

Env: FCC_DRIVER (the flux-curve-csi binary), FCC_CONTROLLER (the
minicluster-controller binary, for the manager), FCC_KEEP=1.
"""

import atexit
import calendar
import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kueue"))
from node_lib import controller_ready, curve_pod, events_of, install, mounts_of  # noqa: E402
from minicluster_node_test import (all_images, minicluster, pods_of, ready_pods,  # noqa: E402
                                   state)
from e2e_lib import (CONTROLPLANE, REPO, apply, check, check_eq, cond_true, condition,  # noqa: E402
                     free_port, get, kubectl, log, main, service_account_kubeconfig,
                     wait_for)
from kueue_test import Process, start_kueue, wait_crds_established  # noqa: E402

NS = "default"  # the LocalQueue user-queue of examples/multikueue lives here
WORKER_QUOTA_CPU = "500m"  # eph (3 x 100m) + pers (2 x 100m); not third (2 x 100m) too
ORIGIN = "kueue.x-k8s.io/multikueue-origin"
CLUSTER_VARS = ("KUBECONFIG", "FCC_CP_DIR", "FCC_CP_APISERVER")
CLUSTERS = {}  # "worker" / "manager" -> the CLUSTER_VARS of that cluster
EXAMPLES = os.path.join(REPO, "examples", "multikueue")


def since(t):
    return f"{time.monotonic() - t:.1f}s"


def seconds(timestamp):
    """An API timestamp (RFC 3339, UTC, whole seconds) as epoch seconds."""
    return calendar.timegm(time.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ"))


# ------------------------------------------------------------------ clusters

@contextlib.contextmanager
def on(cluster):
    """kubectl (e2e_lib's, which reads KUBECONFIG) and the helpers built on
    it talk to `cluster` inside the block. Main thread only: a background
    thread passes --kubeconfig instead."""
    saved = {k: os.environ.get(k) for k in CLUSTER_VARS}
    os.environ.update(CLUSTERS[cluster])
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def start_manager(work):
    """A second control plane, no node: its own free ports on loopback, in
    this network namespace; stopped when the test exits."""
    d = os.path.join(work, "manager")
    t = time.monotonic()
    out = subprocess.run([CONTROLPLANE, "start", d], stdout=subprocess.PIPE, text=True, check=True).stdout
    atexit.register(subprocess.run, [CONTROLPLANE, "stop", d], check=False)
    env = dict(re.findall(r"^export (\w+)=(.*)$", out, re.M))
    CLUSTERS["manager"] = {k: env[k] for k in CLUSTER_VARS}
    log(f"manager control plane up in {since(t)} at {env['FCC_CP_APISERVER']}")
    return d


def kueue_dir():
    r = subprocess.run([os.path.join(REPO, "scripts", "build-kueue")], stdout=subprocess.PIPE,
                       text=True, check=True)
    return r.stdout.strip().splitlines()[-1]


def run_kueue(kdir, work, name):
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    kueue = start_kueue(kdir, d)
    atexit.register(kueue.stop)


def apply_example(name, quota_cpu=None):
    with open(os.path.join(EXAMPLES, name)) as f:
        text = f.read()
    if quota_cpu:
        text, n = re.subn(r"(- name: cpu\n\s+nominalQuota: )\S+", rf"\g<1>{quota_cpu}", text)
        check(n == 1, f"{name}: one cpu nominalQuota")
    kubectl("apply", "-f", "-", input=text)


def setup_worker(work, kdir):
    t = time.monotonic()
    install(work, overlay="multikueue/worker")
    wait_for("the worker's controller Deployment Ready", controller_ready, timeout=180)
    args = get("deployment", "minicluster-controller", "minicluster-system")["spec"]["template"][
        "spec"]["containers"][0]["args"]
    check("--multikueue-worker" in args, f"the worker's controller runs --multikueue-worker: {args}")
    log(f"worker: project installed from deploy/multikueue/worker in {since(t)}")
    run_kueue(kdir, work, "kueue-worker")
    kubectl("apply", "-f", os.path.join(EXAMPLES, "worker-access.yaml"))
    apply_example("worker.yaml", quota_cpu=WORKER_QUOTA_CPU)
    r = subprocess.run([os.path.join(REPO, "deploy", "multikueue", "worker-kubeconfig"), "-"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f"worker-kubeconfig: rc {r.returncode}: {r.stderr}")
    path = os.path.join(work, "worker1.kubeconfig")
    with open(path, "w") as f:
        f.write(r.stdout)
    return path


def setup_manager(work, kdir, worker_kubeconfig):
    t = time.monotonic()
    run_kueue(kdir, work, "kueue")
    # The manager variant: CRD, RBAC, admission policies. Its Deployment is
    # stored but never runs (no node, no deployment controller here).
    kubectl("apply", "-k", os.path.join(REPO, "deploy", "multikueue", "manager"))
    wait_crds_established(["miniclusters.minicluster.dev"])
    # The controller as its ServiceAccount, as the Deployment would run it
    # (the admission policies admit its Jobs by that identity).
    sa = service_account_kubeconfig(work, "minicluster-controller", "minicluster-system")
    port = free_port()
    ctl = Process("controller", [
        os.environ["FCC_CONTROLLER"], "--kubeconfig", sa, "--log-level", "debug",
        "--health-addr", f"127.0.0.1:{port}", "--kueue-workload-api", "kueue.x-k8s.io/v1beta2",
        "--workload-label-selector", "minicluster.dev/name"], work, f"http://127.0.0.1:{port}/readyz")
    atexit.register(ctl.stop)
    wait_for("the manager's minicluster-controller /readyz", ctl.healthy, timeout=60)
    kubectl("-n", "kueue-system", "create", "secret", "generic", "worker1-kubeconfig",
            f"--from-file=kubeconfig={worker_kubeconfig}")
    apply_example("manager.yaml")
    wait_for("MultiKueueCluster worker1 Active", lambda: cond_true(
        get("multikueueclusters.kueue.x-k8s.io", "worker1"), "Active"), timeout=60)
    wait_for("AdmissionCheck multikueue Active", lambda: cond_true(
        get("admissionchecks.kueue.x-k8s.io", "multikueue"), "Active"), timeout=60)
    log(f"manager: Kueue, the project and MultiKueue to worker1 set up in {since(t)}")


def setup(work):
    t = time.monotonic()
    CLUSTERS["worker"] = {k: os.environ[k] for k in CLUSTER_VARS}
    os.environ.setdefault("FCC_CONTROLLER", os.path.join(REPO, "build", "src", "controller",
                                                         "minicluster-controller"))
    mdir = start_manager(work)
    kdir = kueue_dir()
    with on("worker"):
        worker_kubeconfig = setup_worker(work, kdir)
    with on("manager"):
        setup_manager(mdir, kdir, worker_kubeconfig)
    log(f"setup: both clusters ready in {since(t)}")


# ------------------------------------------------------------------ objects

def queued(name, size, command=None):
    """A MiniCluster on the manager, in the user-queue LocalQueue."""
    mc = minicluster(name, NS, size, command)
    mc["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "user-queue"}
    with on("manager"):
        apply(mc)


def job(name):
    return get("job", name, NS)


def finishing(j):
    """The Job `j` is gone (None) or has met its successPolicy, completed or
    failed: its Workload's quota is about to be free."""
    return j is None or any(cond_true(j, c) for c in ("SuccessCriteriaMet", "Complete", "Failed"))


def admitted(name):
    """Its Job runs (unsuspended) in the current cluster."""
    j = job(name)
    return j is not None and j["spec"].get("suspend") is False


def waits_for_quota(workload):
    """Kueue's Workload `workload` (or None) exists and has no quota."""
    qr = condition(workload, "QuotaReserved")
    return qr is not None and qr["status"] == "False" and "insufficient" in qr.get("message", "")


SNAPSHOT_KINDS = ("jobs.batch,services,networkpolicies,pods,workloads.kueue.x-k8s.io,"
                  "miniclusters.minicluster.dev")


def snapshot():
    """The objects of SNAPSHOT_KINDS in NS of the current cluster, read by one
    kubectl (2 cores run both clusters, Kueue twice and the brokers):
    {(kind, MiniCluster name): [objects]}; pods and Workloads under their
    minicluster.dev/name label, the rest under their own name."""
    found = {}
    for o in json.loads(kubectl("get", SNAPSHOT_KINDS, "-n", NS, "-o", "json").stdout)["items"]:
        meta = o["metadata"]
        name = meta.get("labels", {}).get("minicluster.dev/name") if o["kind"] in (
            "Pod", "Workload") else meta["name"]
        found.setdefault((o["kind"], name), []).append(o)
    return found


def kinds_of(found, name):
    """Which of a Job, Service, NetworkPolicy and pods of MiniCluster `name`
    a snapshot holds."""
    return [kind for kind in ("Job", "Service", "NetworkPolicy", "Pod") if (kind, name) in found]


def wait_gone_from_worker(name, uids, t0, timeout=120):
    """Waits until the worker has nothing of `name` (Job first, then the
    rest, then the node's mounts); logs when each went, from t0."""
    steps = []
    with on("worker"):
        wait_for(f"{name}'s Job gone from the worker", lambda: job(name) is None, timeout=timeout,
                 interval=0.1)
        steps.append(f"Job {since(t0)}")
        wait_for(f"{name}'s Service, NetworkPolicy and pods gone from the worker",
                 lambda: not kinds_of(snapshot(), name), timeout=timeout, interval=0.1)
        steps.append(f"Service, NetworkPolicy and pods {since(t0)}")
    wait_for(f"no volume of {name} left on the node", lambda: not any(mounts_of(u) for u in uids),
             timeout=90, interval=0.1)
    steps.append(f"mounts {since(t0)}")
    return ", ".join(steps)


def warnings_of(name):
    """Warning Events about the pods of MiniCluster `name` in the current
    cluster but failed readiness probes (a broker still wiring up, or done),
    e.g. a mount retried: what makes a slow start, as "reason xcount:
    message" lines."""
    found = [e for e in json.loads(kubectl("get", "events", "-n", NS, "-o", "json").stdout)["items"]
             if e.get("type") == "Warning" and e.get("reason") != "Unhealthy"
             and e["involvedObject"].get("kind") == "Pod"
             and e["involvedObject"].get("name", "").startswith(f"{name}-")]
    return [f"{e['reason']} x{e.get('count', 1)}: {e.get('message', '')[:300]}" for e in found]


def cluster_of(name):
    with on("manager"):
        return ((get("miniclusters.minicluster.dev", name, NS) or {}).get("status", {}).get("workload") or {}).get(
            "clusterName")


def check_owned_by_job(name):
    """The worker's Service and NetworkPolicy of `name`: one controller
    reference, to the worker's Job, and the origin label."""
    j = job(name)
    created = {}
    for kind in ("service", "networkpolicy"):
        obj = get(kind, name, NS)
        check(obj is not None, f"the worker has the {kind} of {name}")
        created[kind] = seconds(obj["metadata"]["creationTimestamp"]) - seconds(
            j["metadata"]["creationTimestamp"])
        refs = obj["metadata"].get("ownerReferences", [])
        check(len(refs) == 1 and refs[0]["kind"] == "Job" and refs[0]["apiVersion"] == "batch/v1"
              and refs[0]["uid"] == j["metadata"]["uid"] and refs[0].get("controller") is True,
              f"the worker's {kind} {name} is owned by the worker's Job {j['metadata']['uid']}: {refs}")
        check_eq(obj["metadata"].get("labels", {}).get(ORIGIN), j["metadata"]["labels"].get(ORIGIN),
                 f"the {ORIGIN} label of the worker's {kind} {name}")
    check(j["metadata"]["labels"].get(ORIGIN), f"the worker's Job {name} has the {ORIGIN} label")
    log(f"the worker's Service and NetworkPolicy of {name}: owned by its Job, created "
        f"{created['service']:.0f}s and {created['networkpolicy']:.0f}s after it (creationTimestamp)")


def check_copy(name):
    """The worker's Job of `name` is MultiKueue's copy of the manager's:
    labels plus MultiKueue's two, no owner, no managedBy (the worker's Job
    controller runs it)."""
    j = job(name)
    labels = j["metadata"].get("labels", {})
    check(labels.get(ORIGIN) and labels.get("kueue.x-k8s.io/prebuilt-workload-name") and
          labels.get("minicluster.dev/name") == name and
          labels.get("app.kubernetes.io/managed-by") == "minicluster-controller",
          f"the worker's Job {name} has the controller's and MultiKueue's labels: {labels}")
    check_eq(j["metadata"].get("ownerReferences"), None, f"owner references of the worker's Job {name}")
    check_eq(j["spec"].get("managedBy"), None, f"spec.managedBy of the worker's Job {name}")
    kueue_labels = {k: v for k, v in j["spec"]["template"]["metadata"].get("labels", {}).items()
                    if k.startswith("kueue.x-k8s.io/")}
    log(f"the worker's Job {name}: {ORIGIN}={labels[ORIGIN]}, pod template's Kueue labels "
        f"{kueue_labels}")


def third_held_while_eph_runs(t0, t_third):
    """Samples, until eph's Job on the worker finishes: third Queued on the
    manager (its Job suspended), nothing of it on the worker, and (once at
    least) its Workload on the worker waiting for quota. The manager is read
    first, then the worker, whose Jobs (eph's and third's) are listed first:
    a sample counts only if eph's Job had not finished when it was taken.
    Returns the uids of eph's pods seen on the worker."""
    eph_uids, samples, waited, eph_states, third_status = set(), 0, False, [], None
    eph_running = None
    while True:
        with on("manager"):
            manager = snapshot()
        with on("worker"):
            worker = snapshot()
        eph_pods = worker.get(("Pod", "eph"), [])
        eph_uids |= {p["metadata"]["uid"] for p in eph_pods}
        if eph_running is None and sum(p["status"].get("phase") == "Running" for p in eph_pods) == 3:
            eph_running = since(t0)
        if finishing(worker.get(("Job", "eph"), [None])[0]):
            break
        third = manager[("MiniCluster", "third")][0]["status"]
        check_eq(third.get("state"), "Queued", "third's state on the manager while eph and pers run")
        check(manager[("Job", "third")][0]["spec"].get("suspend") is True,
              "third's Job on the manager stays suspended")
        check_eq(kinds_of(worker, "third"), [], "third's objects on the worker while eph and pers run")
        samples += 1
        waited |= waits_for_quota(worker.get(("Workload", "third"), [None])[0])
        third_status = third.get("workload")
        eph = manager[("MiniCluster", "eph")][0].get("status", {})
        seen = (eph.get("state"), (eph.get("workload") or {}).get("clusterName"))
        if not eph_states or eph_states[-1] != seen:
            eph_states.append(seen)
        check(time.monotonic() - t0 < 300, "eph did not finish on the worker within 300 s")
        time.sleep(0.3)
    log(f"third Queued with nothing on the worker: {samples} samples until eph finished on the "
        f"worker {since(t_third)} after third's create (its Workload seen waiting for the "
        f"worker's quota: {waited}); third's status.workload on the manager: {third_status}")
    check("; waiting for admission check multikueue (Pending" in (third_status or {}).get("message", ""),
          f"third's status says it waits for MultiKueue: {third_status}")
    log(f"eph's (state, clusterName) on the manager meanwhile: {eph_states}; its 3 pods all Running "
        f"on the worker {eph_running} after its create")
    check(waited, "third's Workload was seen on the worker, waiting for quota, while eph ran")
    return eph_uids


class FollowIndexZero(threading.Thread):
    """`kubectl logs -f` of index 0's broker container on the worker, tried
    every 0.2 s until the container has started, then followed to its end:
    MultiKueue deletes the worker's Job and pods as soon as the manager's
    Workload finishes, so the log cannot be read afterwards."""

    def __init__(self, name, timeout=300):
        super().__init__(daemon=True)
        self.name_, self.timeout = name, timeout
        self.kubeconfig = CLUSTERS["worker"]["KUBECONFIG"]
        self.text, self.last_error = None, ""
        self.start()

    def kubectl(self, *args, timeout=30):
        return subprocess.run(["kubectl", "--kubeconfig", self.kubeconfig, "-n", NS, *args],
                              capture_output=True, text=True, timeout=timeout)

    def run(self):
        deadline = time.monotonic() + self.timeout
        selector = f"minicluster.dev/name={self.name_},batch.kubernetes.io/job-completion-index=0"
        while time.monotonic() < deadline:
            pod = self.kubectl("get", "pods", "-l", selector, "-o", "name").stdout.split()
            if pod:
                r = self.kubectl("logs", "-f", pod[0], "-c", "flux-broker",
                                 timeout=max(1, deadline - time.monotonic()))
                if r.returncode == 0:
                    self.text = r.stdout
                    return
                self.last_error = r.stderr.strip()
            time.sleep(0.2)

    def result(self):
        self.join(self.timeout + 10)
        check(self.text is not None,
              f"index 0 of {self.name_} was never followed on the worker (last: {self.last_error})")
        return self.text


# ------------------------------------------------------------------ the flow

def test_multikueue(work):
    t0 = time.monotonic()
    # 1. eph and pers fill the worker's quota; third waits on the manager.
    queued("eph", 3, ["flux", "run", "-N3", "hostname"])
    follower = FollowIndexZero("eph")
    queued("pers", 2)
    with on("manager"):
        wait_for("the manager's Jobs of eph and pers", lambda: job("eph") and job("pers"), timeout=60)
        for name in ("eph", "pers"):
            check_eq(job(name)["spec"].get("managedBy"), "kueue.x-k8s.io/multikueue",
                     f"spec.managedBy of the manager's Job {name} (Kueue's webhook)")
    with on("worker"):
        wait_for("eph and pers admitted on the worker", lambda: admitted("eph") and admitted("pers"),
                 timeout=120, interval=0.1)
    log(f"eph and pers dispatched to the worker and admitted there {since(t0)} after eph's create")
    t_third = time.monotonic()
    queued("third", 2, ["flux", "run", "-N2", "hostname"])
    with on("manager"):
        wait_for("third's Job on the manager and its MiniCluster Queued", lambda: job("third") and state(
            "third", NS) == "Queued", timeout=30, interval=0.1)
    eph_uids = third_held_while_eph_runs(t0, t_third)
    with on("worker"):
        for name in ("eph", "pers"):
            for w in warnings_of(name):
                log(f"worker: {name}'s pods: {w}")

    # 2. pers on the worker: its Service is the worker Job's; its brokers
    # run a job on both.
    with on("worker"):
        pers = wait_for("pers's brokers Ready on the worker", lambda: ready_pods("pers", NS, 2),
                        timeout=240)
        log(f"pers Ready on the worker {since(t0)} after eph's create")
        check_copy("pers")
        check_owned_by_job("pers")
        out = kubectl("exec", "-n", NS, pers[0]["metadata"]["name"], "--", "flux", "run", "-N2",
                      "hostname", timeout=120).stdout
        check_eq(sorted(out.split()), ["pers-0", "pers-1"], "flux run -N2 hostname in pers on the worker")

    # 3. eph: three hostnames from index 0, Succeeded on the manager,
    # nothing left on the worker.
    with on("manager"):
        wait_for("eph Succeeded or Failed on the manager", lambda: state("eph", NS) in (
            "Succeeded", "Failed"), timeout=120, interval=0.1)
        check_eq(state("eph", NS), "Succeeded", "eph's state on the manager")
    t_done = time.monotonic()
    log(f"eph Succeeded on the manager {since(t0)} after its create")
    out = follower.result()
    for i in range(3):
        check(f"eph-{i}\n" in out, f"index 0 of eph printed eph-{i}: {out[-600:]}")
    check_eq(cluster_of("eph"), "worker1", "eph's status.workload.clusterName")
    with on("worker"):
        eph_uids |= {p["metadata"]["uid"] for p in pods_of("eph", NS)}
    check_eq(len(eph_uids), 3, "eph's pods seen on the worker")
    gone = wait_gone_from_worker("eph", eph_uids, t_done)
    log(f"eph gone from the worker after Succeeded on the manager: {gone}")
    with on("manager"):  # the MiniCluster's Events, as on one cluster
        notes = {e["reason"]: e["message"] for e in events_of("eph", NS)
                 if e["involvedObject"].get("kind") == "MiniCluster"}
    check("on worker cluster worker1" in notes.get("Admitted", ""),
          f"eph's Admitted event on the manager names worker1: {notes}")

    # 4. third runs in the quota eph freed.
    with on("manager"):
        wait_for("third Succeeded or Failed on the manager", lambda: state("third", NS) in (
            "Succeeded", "Failed"), timeout=240)
        check_eq(state("third", NS), "Succeeded", "third's state on the manager")
    check_eq(cluster_of("third"), "worker1", "third's status.workload.clusterName")
    log(f"third Succeeded on the manager {since(t_done)} after eph did")

    # 5. The worker's admission policy: a hand-made pod with pers's volume.
    with on("worker"):
        attrs = next(v["csi"]["volumeAttributes"] for v in job("pers")["spec"]["template"]["spec"][
            "volumes"] if v.get("csi"))
        r = kubectl("create", "-f", "-", input=json.dumps(curve_pod("thief", NS, attrs=attrs)),
                    check_rc=False)
        check(r.returncode != 0 and ("curve-volume-pods.minicluster.dev" in r.stderr or
                                     "only pods that the Job controller creates" in r.stderr),
              f"a hand-made pod with pers's curve volume refused on the worker: {r.stdout} {r.stderr}")
        check(get("pod", "thief", NS) is None, "no pod thief")

    # 6. Deleting pers on the manager empties the worker.
    with on("worker"):
        uids = {p["metadata"]["uid"] for p in pods_of("pers", NS)}
    t = time.monotonic()
    with on("manager"):
        kubectl("delete", "miniclusters.minicluster.dev", "pers", "-n", NS)
    gone = wait_gone_from_worker("pers", uids, t)
    log(f"pers gone from the worker after its delete on the manager: {gone}")
    with on("manager"):
        for name in ("eph", "third"):
            kubectl("delete", "miniclusters.minicluster.dev", name, "-n", NS)
    log(f"the flow took {since(t0)}")


if __name__ == "__main__":
    main([test_multikueue], needs_controller=False, crd=False, node_images=all_images, setup=setup)
