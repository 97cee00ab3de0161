#!/usr/bin/env python3
"""Kueue queues MiniClusters of real pods on the real node.

The project is installed from deploy/ as in node_test.py (driver DaemonSet,
controller Deployment, both pods of the node); Kueue's manager (the
project's build, scripts/build-kueue) runs next to the control plane as in
test/kueue (start_kueue: webhooks on loopback). The queue objects are the
files of examples/kueue/, with the ClusterQueue's CPU quota scaled to the
node: 400m, two MiniClusters of 2 x 100m. Pods run the Flux test image.

  test_quota       two run, a third has no pod until one completes, then
                   runs to completion
  test_preemption  an `urgent` MiniCluster preempts one: its pods go and
                   their volumes are unmounted; it runs again after
                   re-admission, with the same key
  test_partial_admission
                   minSize 2 of size 3 where the quota fits 2: admitted
                   with 2, `flux run -N2` runs, rank 2 down; where it fits 3,
                   all 3 run
  test_numbers     create -> all Running and admission -> all Running for
                   size 3 and size 8 (printed, docs/internals/performance.md)
  test_kueue_down  Kueue's pod webhooks registered as its install does,
                   Kueue stopped: a deleted driver pod is not re-created
                   (the outage); after deploy/kueue/exclude-namespaces the
                   driver's and the controller's pods come back, while a
                   user's pod is still refused

Env: FCC_DRIVER (the flux-curve-csi binary), FCC_KEEP=1.
"""

import atexit
import json
import os
import re
import subprocess
import sys
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kueue"))
from node_lib import (CONTROLLER_NS, NAMESPACE, controller_ready, daemonset_ready,  # noqa: E402
                      driver_pod, events_of, install, mounts_of)
from minicluster_node_test import (all_images, minicluster, pods_of, public_key_of,  # noqa: E402
                                   ready_pods, running_pods, state, wait_gone)
from e2e_lib import (REPO, apply, check, check_eq, get, items, kubectl, log, main,  # noqa: E402
                     wait_for)
from kueue_test import start_kueue  # noqa: E402

NS = "default"  # the LocalQueue of examples/kueue lives here
QUOTA_CPU = "400m"
POD_CPU = "100m"
STARTED = []
KUEUE_DIR = []


def setup(work):
    install(work)
    r = subprocess.run([os.path.join(REPO, "scripts", "build-kueue")], stdout=subprocess.PIPE,
                       text=True, check=True)
    KUEUE_DIR.append(r.stdout.strip().splitlines()[-1])
    kueue = start_kueue(KUEUE_DIR[0], work)
    STARTED.append(kueue)
    atexit.register(kueue.stop)
    examples = os.path.join(REPO, "examples", "kueue")
    for name in ["resource-flavor.yaml", "workload-priority-class.yaml", "cluster-queue.yaml",
                 "local-queue.yaml"]:
        with open(os.path.join(examples, name)) as f:
            text = f.read()
        if name == "cluster-queue.yaml":
            text, n = re.subn(r"(- name: cpu\n\s+nominalQuota: )\S+", rf"\g<1>{QUOTA_CPU}", text)
            check(n == 1, "cluster-queue.yaml: one cpu nominalQuota")
        kubectl("apply", "-f", "-", input=text)


def queued(name, size, command=None, priority=None, cpu=POD_CPU, min_size=None, **spec):
    mc = minicluster(name, NS, size, command,
                     resources={"requests": {"cpu": cpu, "memory": "64Mi"}}, **spec)
    if min_size:
        mc["spec"]["minSize"] = min_size
    mc["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "user-queue"}
    if priority:
        mc["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = priority
    apply(mc)


def suspended(name):
    job = get("job", name, NS)
    return job is None or job["spec"].get("suspend", False)


def job_finishing(name):
    """The Job has met its successPolicy, completed or failed: the earliest
    point Kueue may count its quota as free."""
    conds = ((get("job", name, NS) or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] in ("SuccessCriteriaMet", "Complete", "Failed") and c["status"] == "True"
               for c in conds)


def all_running(name, size):
    return running_pods(name, NS, size)


def uids_of(name):
    return [p["metadata"]["uid"] for p in pods_of(name, NS)]


def delete(name):
    uids = uids_of(name)
    kubectl("delete", "miniclusters.minicluster.dev", name, "-n", NS)
    wait_gone(name, NS, uids)


def test_quota(work):
    queued("first", 2, ["flux", "run", "-N2", "sleep", "15"])
    queued("held", 2)  # persistent: holds its quota until deleted
    wait_for("first and held Running", lambda: all_running("first", 2) and all_running("held", 2),
             timeout=180)
    queued("third", 2, ["flux", "run", "-N2", "hostname"])
    wait_for("third's Job created", lambda: get("job", "third", NS), timeout=60)
    deadline = time.monotonic() + 120
    while not job_finishing("first") and time.monotonic() < deadline:
        check(suspended("third") and not pods_of("third", NS),
              f"third stays suspended with no pod while two run (state {state('third', NS)})")
        time.sleep(0.5)
    wait_for("first Succeeded", lambda: state("first", NS) in ("Succeeded", "Failed"), timeout=60)
    check_eq(state("first", NS), "Succeeded", "first's state")
    wait_for("third Succeeded once first freed its quota",
             lambda: state("third", NS) in ("Succeeded", "Failed"), timeout=180)
    check_eq(state("third", NS), "Succeeded", "third's state")
    check(all_running("held", 2), "held kept running throughout")
    delete("first")
    delete("third")


def test_preemption(work):
    # `held` (from test_quota) and `second`, both persistent, fill the quota.
    queued("second", 2)
    wait_for("held and second Running", lambda: all_running("held", 2) and all_running("second", 2),
             timeout=180)
    keys = {n: public_key_of(all_running(n, 2)[0]["metadata"]["uid"]) for n in ("held", "second")}
    before = {n: uids_of(n) for n in keys}
    t0 = time.monotonic()
    queued("urgent", 2, ["flux", "run", "-N2", "hostname"], priority="urgent")
    victim = wait_for("Kueue suspending one of them", lambda: next(
        (n for n in keys if suspended(n)), None), timeout=120, interval=0.1)
    t_suspended = time.monotonic()
    log(f"preempted: {victim}, {t_suspended - t0:.1f}s after urgent's create")
    # Kueue may re-admit the victim before its old pods are gone (they are
    # still in their grace): wait for those pods, not for no pods.
    wait_for(f"{victim}'s old pods gone", lambda: not set(uids_of(victim)) & set(before[victim]),
             timeout=120, interval=0.1)
    t_gone = time.monotonic()
    wait_for("urgent's pods all Running", lambda: all_running("urgent", 2) or state("urgent", NS) in (
        "Succeeded", "Failed"), timeout=180, interval=0.1)
    log(f"{victim}'s old pods gone {t_gone - t_suspended:.1f}s after its suspension; urgent's pods "
        f"Running {time.monotonic() - t0:.1f}s after its create")
    wait_for(f"{victim}'s old volumes unmounted", lambda: not any(mounts_of(u) for u in before[victim]),
             timeout=120)
    wait_for("urgent Succeeded", lambda: state("urgent", NS) in ("Succeeded", "Failed"), timeout=180)
    check_eq(state("urgent", NS), "Succeeded", "urgent's state")
    pods = wait_for(f"{victim} Running again after re-admission", lambda: all_running(victim, 2),
                    timeout=180)
    check(not set(uids_of(victim)) & set(before[victim]), "new pods after re-admission")
    check_eq(public_key_of(pods[0]["metadata"]["uid"]), keys[victim],
             f"{victim}'s key after re-admission")
    # Preemption is not a lost broker (docs/user/broker-loss.md): the suspended
    # Job's pods are not counted, and no BrokerLost Event.
    check_eq(get("job", victim, NS)["status"].get("failed", 0), 0,
             f"{victim}'s Job's counted failures after preemption")
    check_eq([e.get("note") for e in events_of(victim, NS) if e.get("reason") == "BrokerLost"], [],
             f"{victim}'s BrokerLost Events")
    for name in ("urgent", "held", "second"):
        delete(name)


def test_partial_admission(work):
    """minSize 2 of size 3 at 150m a pod: the 400m quota fits 2, so Kueue
    admits 2. The controller tells the lead (its pod's annotation): the
    instance has 2 nodes (rank 2 excluded, not down), `flux submit -N3` is
    refused at once naming the admitted count, `-N2` runs. At 100m a pod
    Kueue admits all 3, and the command `flux run -N3`, under Fluxion's
    fcfs, waits for all three brokers (broker.quorum: the admitted count,
    not minSize) and succeeds."""
    queued("partial", 3, cpu="150m", min_size=2)
    pods = wait_for("partial's 2 brokers Ready", lambda: ready_pods("partial", NS, 2), timeout=240)
    job = get("job", "partial", NS)
    check_eq((job["spec"]["parallelism"], job["spec"]["completions"]), (2, 2),
             "the Job's parallelism and completions after partial admission")
    wait_for('partial\'s status.brokers "2/2 (of 3)"', lambda: (
        get("miniclusters.minicluster.dev", "partial", NS).get("status") or {}).get("brokers") == "2/2 (of 3)",
        timeout=60)
    lead = pods[0]["metadata"]["name"]
    check_eq(pods[0]["metadata"].get("annotations", {}).get("minicluster.dev/admitted"), "2",
             "the lead pod's admitted count")
    out = kubectl("exec", "-n", NS, lead, "--", "flux", "run", "-N2", "hostname", timeout=120).stdout
    check_eq(sorted(out.split()), ["partial-0", "partial-1"], "flux run -N2 hostname")
    nodes = kubectl("exec", "-n", NS, lead, "--", "flux", "resource", "list", "-no",
                    "{state} {nnodes}", timeout=120).stdout.split("\n")
    check_eq(sorted(l for l in nodes if l and not l.endswith(" 0")), ["free 2"],
             "flux resource list: the admitted brokers, no rank down")
    refused = kubectl("exec", "-n", NS, lead, "--", "flux", "submit", "-N3", "hostname",
                      check_rc=False, timeout=120)
    check(refused.returncode != 0 and "Kueue admitted 2" in refused.stderr,
          f"flux submit -N3 refused at once: rc={refused.returncode} {refused.stderr.strip()}")
    log(f"partial: flux submit -N3: {refused.stderr.strip()}")
    delete("partial")

    # The command waits for every admitted broker (broker.quorum is the
    # admitted count): Fluxion's fcfs would refuse a job for more nodes
    # than are up.
    queued("whole", 3, ["flux", "run", "-N3", "hostname"], cpu="100m", min_size=2)
    wait_for("whole Succeeded", lambda: state("whole", NS) in ("Succeeded", "Failed"), timeout=240)
    check_eq(state("whole", NS), "Succeeded", "whole's state (3 admitted, flux run -N3)")
    check_eq(get("job", "whole", NS)["spec"]["parallelism"], 3, "whole's parallelism")
    delete("whole")


def test_numbers(work):
    """Sizes 3 and 8 at 50m a pod (size 8 uses the whole quota)."""
    for size in (3, 8):
        name = f"size{size}"
        t0 = time.monotonic()
        queued(name, size, cpu="50m")
        admitted = wait_for(f"{name} admitted", lambda: not suspended(name) and time.monotonic(),
                            timeout=120)
        wait_for(f"{name} all Running", lambda: all_running(name, size), timeout=300)
        t1 = time.monotonic()
        log(f"size {size}: create to all Running {t1 - t0:.1f}s, admission to all Running "
            f"{t1 - admitted:.1f}s")
        delete(name)


POD_HOOKS = ("mpod.kb.io", "vpod.kb.io", "mdeployment.kb.io", "vdeployment.kb.io")


def register_pod_webhooks():
    """Kueue's pod and Deployment webhooks, as its kustomize install
    registers them (failurePolicy Fail; the namespaceSelector its
    kustomization.yaml patches in), served by the running Kueue like the Job
    webhook start_kueue registered. The pod integration is off here, so
    Kueue answers them with its no-op handler, as a default install's
    disabled integrations are answered."""
    comp = os.path.join(KUEUE_DIR[0], "config", "components", "webhook")
    selectors = {}
    with open(os.path.join(comp, "kustomization.yaml")) as f:
        for p in yaml.safe_load(f).get("patches", []):
            for h in (yaml.safe_load(p.get("patch") or "{}") or {}).get("webhooks", []):
                if "namespaceSelector" in h:
                    selectors[h["name"]] = h["namespaceSelector"]
    check({"mpod.kb.io", "vpod.kb.io"} <= set(selectors),
          f"Kueue's webhook kustomization gives the pod webhooks a selector: {sorted(selectors)}")
    with open(os.path.join(comp, "manifests.yaml")) as f:
        configs = [d for d in yaml.safe_load_all(f) if d]
    added = []
    for c in configs:
        kind, name = c["kind"].lower(), "kueue-" + c["metadata"]["name"]
        live = get(kind, name)
        job = next(h for h in live["webhooks"] if h["name"].endswith("job.kb.io"))
        base = job["clientConfig"]["url"].rsplit("/", 1)[0]
        ops = []
        for h in c["webhooks"]:
            if h["name"] not in POD_HOOKS:
                continue
            path = h["clientConfig"]["service"]["path"]
            h["clientConfig"] = {"url": base + path, "caBundle": job["clientConfig"]["caBundle"]}
            if h["name"] in selectors:
                h["namespaceSelector"] = selectors[h["name"]]
            ops.append({"op": "add", "path": "/webhooks/-", "value": h})
            added.append(h["name"])
        if ops:
            kubectl("patch", kind, name, "--type=json", "-p", json.dumps(ops))
    check_eq(sorted(added), sorted(POD_HOOKS), "Kueue's pod and Deployment webhooks registered")


def pod_refusal(ns):
    """What the API server answers a pod create in `ns` (server-side dry
    run: every admission webhook is called, nothing is created)."""
    r = kubectl("-n", ns, "run", "kueue-down-probe", "--image=flux-curve-csi:probe",
                "--restart=Never", "--dry-run=server", check_rc=False)
    return (r.stdout + r.stderr).strip() if r.returncode else ""


def test_kueue_down(work):
    register_pod_webhooks()
    check_eq(pod_refusal(NS), "", "a pod create while Kueue is up (its no-op pod webhook)")
    STARTED[0].stop()
    log("Kueue stopped")
    refusal = wait_for("a pod refused for want of Kueue", lambda: pod_refusal(NS), timeout=30)
    check('failed calling webhook "mpod.kb.io"' in refusal, f"the refusal names mpod.kb.io: {refusal}")
    # The outage as Kueue's install leaves it: the DaemonSet cannot replace
    # its pod.
    old = driver_pod()["metadata"]["name"]
    kubectl("-n", NAMESPACE, "delete", "pod", old)
    wait_for("the DaemonSet's FailedCreate naming Kueue's pod webhook", lambda: any(
        e["reason"] == "FailedCreate" and 'failed calling webhook "mpod.kb.io"' in e["message"]
        for e in events_of("flux-curve-csi-node", NAMESPACE)), timeout=60)
    check(driver_pod() is None, "no driver pod while Kueue is down")
    # The fix, as docs/admin/kueue.md gives it; a second run changes nothing.
    script = os.path.join(REPO, "deploy", "kueue", "exclude-namespaces")
    first = subprocess.run([script], capture_output=True, text=True, check=True).stdout
    again = subprocess.run([script], capture_output=True, text=True, check=True).stdout
    log(first.strip())
    check(" 0 webhook(s) patched" not in first, f"the first run patches: {first}")
    check_eq(again.count(" 0 webhook(s) patched"), 2, f"the second run patches nothing: {again}")
    t0 = time.monotonic()
    wait_for("the driver pod back and the DaemonSet Ready", daemonset_ready, timeout=180)
    log(f"driver pod back {time.monotonic() - t0:.1f}s after the fix (DaemonSet retry back-off)")
    ctl = items("pods", CONTROLLER_NS, "app.kubernetes.io/name=minicluster-controller")
    kubectl("-n", CONTROLLER_NS, "delete", "pod", ctl[0]["metadata"]["name"], "--wait=false")
    wait_for("the controller Deployment's two replicas Ready again", lambda: controller_ready() and len(
        items("pods", CONTROLLER_NS, "app.kubernetes.io/name=minicluster-controller")) == 2, timeout=120)
    # What stays: a user's pod still needs Kueue (docs/admin/kueue.md).
    check('failed calling webhook "mpod.kb.io"' in pod_refusal(NS), "a user's pod is still refused")
    check_eq(pod_refusal(NAMESPACE), "", "a pod in flux-curve-csi is no longer sent to Kueue")


if __name__ == "__main__":
    main([test_quota, test_preemption, test_partial_admission, test_numbers, test_kueue_down], needs_controller=False, crd=False,
         node_images=all_images, setup=setup)
