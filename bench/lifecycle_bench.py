#!/usr/bin/env python3
"""MiniCluster lifecycle on the real node (issue 28): how long a MiniCluster
takes to wire up against a floor, and how long its pods outlive a delete.

Runs on scripts/controlplane --node with the project installed from deploy/
(as the node tests do) and the Flux test image. Per size, in this order:

- floor: an Indexed Job of that size plus its headless Service, same image,
  same requests, whose pods only wait until every peer's name resolves, then
  print the time; the floor is create -> the last pod's time;
- persistent MiniCluster: create -> rank 0's broker entered state `run`
  (its `flux dmesg`; rank 0 gets there only once every rank has joined) and
  create -> every pod Ready (what Kueue's waitForPodsReady sees); then
  `kubectl delete minicluster` -> every pod gone;
- ephemeral MiniCluster running `flux run -N<size> hostname`: create ->
  Succeeded, index 0's log checked for every hostname; then delete -> gone;
- the persistent MiniCluster again with an application image that has no
  Flux (app-busybox), its brokers run from the driver's Flux view (issue 39):
  create -> wired and -> Ready, against the Flux-in-image one.

Then the view against Flux in the image (issue 50, item 4): per size and
round, the two persistent MiniClusters one after the other, create ->
every broker started, rank 0's rc1, wired and Ready; and the scheduler's
throughput (issue 50): Fluxion and sched-simple, each
in one persistent MiniCluster of the view, jobs/s for FCC_BENCH_SCHED_JOBS
(default 500) one-core `true` jobs. And broker loss (issue 60): the time
until `flux run -N<size>` answers again after a follower's broker, the
lead's broker, a follower's pod or the lead's pod (without and with
spec.flux.state) is lost.

Prints numbers; asserts only that what it measures happened.

  unshare -m --propagation private bench/lifecycle_bench.py
Env: FCC_DRIVER (the flux-curve-csi binary), FCC_BENCH_SIZES (default
1,3,8), FCC_BENCH_ROUNDS (default 1), FCC_BENCH_CSV (a CSV of the rows for
bench/plot_lifecycle.py), FCC_BENCH_PARTS (default lifecycle,view,scheduler,loss),
FCC_BENCH_LOSS_ROUNDS (default 5, at size 3; size 8 once).
scripts/bench-lifecycle builds, runs and plots.
"""

import collections
import contextlib
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid

import yaml  # python3-yaml (scripts/install-deps)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "node"))
from minicluster_node_test import (flux_image, index0_logs, minicluster,  # noqa: E402
                                   pods_of, ready_pods, running_pods, signal_broker, state,
                                   state_claim, wait_gone)
from view_node_test import all_images, app, persistent_lead  # noqa: E402
from node_lib import driver_image, install  # noqa: E402
from e2e_lib import apply, check, create_namespace, get, items, kubectl, log, main, wait_for  # noqa: E402

SIZES = [int(s) for s in os.environ.get("FCC_BENCH_SIZES", "1,3,8").split(",")]
ROUNDS = int(os.environ.get("FCC_BENCH_ROUNDS", "1"))
SCHED_JOBS = int(os.environ.get("FCC_BENCH_SCHED_JOBS", "500"))
# (size, rounds) of the loss part (issue 60): the median of five at size 3,
# once at size 8.
LOSS_ROUNDS = [(3, int(os.environ.get("FCC_BENCH_LOSS_ROUNDS", "5"))), (8, 1)]
RESOURCES = {"requests": {"cpu": "100m", "memory": "64Mi"}}
VIEW = "flux-core-0.88.0"  # the driver's default view
VIEWS_IN_DRIVER_IMAGE = "/usr/share/flux-curve-csi/views"  # src/driver/main.cc
# One size-round, in seconds; also the CSV's columns.
Row = collections.namedtuple("Row", "size floor wired ready gone_persistent ephemeral_done gone_ephemeral "
                             "wired_view ready_view")

# Waits until every peer's name resolves (not its own: a broker never looks
# itself up), then prints the time (epoch s).
FLOOR_SCRIPT = r"""set -u
for i in $(seq 0 $((SIZE - 1))); do
  [ "$i" = "$JOB_COMPLETION_INDEX" ] && continue
  until getent hosts "$JOB-$i.$JOB.$NS.svc.cluster.local" >/dev/null; do sleep 0.1; done
done
echo "resolved $(date +%s.%N)"
"""


def floor_objects(name, ns, size):
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
               "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                        "selector": {"floor": name}}}
    env = [{"name": "SIZE", "value": str(size)}, {"name": "JOB", "value": name},
           {"name": "NS", "value": ns}]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": ns},
           "spec": {"completions": size, "parallelism": size, "completionMode": "Indexed",
                    "backoffLimit": 0,
                    "template": {"metadata": {"labels": {"floor": name}},
                                 "spec": {"subdomain": name, "restartPolicy": "Never",
                                          "terminationGracePeriodSeconds": 5,
                                          "securityContext": {"runAsUser": 1000, "runAsGroup": 1000},
                                          "containers": [{"name": "wait", "image": flux_image(),
                                                          "command": ["/bin/sh", "-c", FLOOR_SCRIPT],
                                                          "env": env, "resources": RESOURCES}]}}}}
    return service, job


def floor_run(ns, size, round_):
    name = f"floor{size}r{round_}"
    t0 = time.time()
    for obj in floor_objects(name, ns, size):
        apply(obj)
    wait_for(f"{name} complete", lambda: (get("job", name, ns) or {}).get("status", {}).get(
        "succeeded") == size, timeout=300, interval=0.5)
    times = []
    for pod in items("pods", ns, f"floor={name}"):
        out = kubectl("logs", "-n", ns, pod["metadata"]["name"]).stdout
        times.append(float(re.search(r"resolved (\S+)", out).group(1)))
    check(len(times) == size, f"{name}: {len(times)} of {size} pods printed their time")
    kubectl("delete", "job", name, "-n", ns, "--cascade=foreground", "--wait=true", timeout=120)
    kubectl("delete", "service", name, "-n", ns)
    return max(times) - t0


def dmesg_run_time(pod, ns):
    """The wall time at which rank 0 entered state `run` (quorum -> run)."""
    out = kubectl("exec", "-n", ns, pod, "--", "flux", "dmesg").stdout
    m = re.search(r"^(\S+)Z broker\.\w+\[0\]: [\w-]+: quorum->run", out, re.M)
    check(m, f"rank 0's dmesg names quorum->run: {out[-400:]}")
    when = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()


def delete_and_time_gone(name, ns):
    """kubectl delete minicluster -> its Job and every pod gone: (seconds,
    the broker exit codes seen while they went: 137 is SIGKILL at the end of
    the grace period, 0 or 143 a broker that stopped on SIGTERM)."""
    uids = [p["metadata"]["uid"] for p in pods_of(name, ns)]
    exits = {}

    def gone():
        pods = pods_of(name, ns)
        for p in pods:
            for c in p["status"].get("containerStatuses", []):
                done = c.get("state", {}).get("terminated")
                if done:
                    exits[p["metadata"]["name"]] = done["exitCode"]
        return not pods and get("job", name, ns) is None

    t0 = time.monotonic()
    kubectl("delete", "minicluster", name, "-n", ns, "--wait=false")
    wait_for(f"{name}'s pods gone", gone, timeout=120, interval=0.1)
    seconds = time.monotonic() - t0
    wait_gone(name, ns, uids)  # and their volumes unmounted
    return seconds, sorted(exits.values())


def persistent_run(ns, size, round_, image=None):
    """With `image`: a MiniCluster of that image, from the driver's view."""
    name = f"{'view' if image else 'lab'}{size}r{round_}"
    t0 = time.time()
    apply(minicluster(name, ns, size, image=image))
    wait_for(f"{name}: every pod Ready", lambda: ready_pods(name, ns, size), timeout=300, interval=0.2)
    all_ready = time.time() - t0
    wired = dmesg_run_time(pods_of(name, ns)[0]["metadata"]["name"], ns) - t0
    gone, exits = delete_and_time_gone(name, ns)
    return wired, all_ready, gone, exits


def ephemeral_run(ns, size, round_):
    name = f"hello{size}r{round_}"
    t0 = time.time()
    apply(minicluster(name, ns, size, ["flux", "run", f"-N{size}", "hostname"]))
    wait_for(f"{name} Succeeded", lambda: state(name, ns) in ("Succeeded", "Failed"),
             timeout=300, interval=0.2)
    done = time.time() - t0
    check(state(name, ns) == "Succeeded", f"{name} ended {state(name, ns)}")
    out = index0_logs(name, ns)
    check(all(f"{name}-{i}\n" in out for i in range(size)), f"index 0 printed every hostname: {out[-400:]}")
    gone, exits = delete_and_time_gone(name, ns)
    return done, gone, exits


def bench_lifecycle(work, sizes=SIZES, rounds=ROUNDS):
    ns = "lifecycle"
    create_namespace(ns)
    # The garbage collector finds a new CRD's objects on its next discovery
    # pass (every 30 s), so the first MiniCluster deleted after the install
    # may wait for it: measured apart, not in the rows.
    apply(minicluster("warmup", ns, 1))
    wait_for("warmup Running", lambda: running_pods("warmup", ns, 1), timeout=300)
    first, _ = delete_and_time_gone("warmup", ns)
    rows = []
    for round_ in range(rounds):
        for size in sizes:
            floor = floor_run(ns, size, round_)
            wired, all_ready, gone_p, exits_p = persistent_run(ns, size, round_)
            done, gone_e, exits_e = ephemeral_run(ns, size, round_)
            wired_v, ready_v, _, _ = persistent_run(ns, size, round_, app("app-busybox"))
            rows.append(Row(size, floor, wired, all_ready, gone_p, done, gone_e, wired_v, ready_v))
            log(f"size {size}: floor {floor:.1f}s wired {wired:.1f}s ready {all_ready:.1f}s "
                f"gone {gone_p:.1f}s (exit codes {exits_p}); ephemeral done {done:.1f}s "
                f"gone {gone_e:.1f}s (exit codes {exits_e}); view: wired {wired_v:.1f}s "
                f"ready {ready_v:.1f}s")
    print("\nMiniCluster lifecycle on the real node, seconds (issue 28):")
    print(f"{'size':>4} {'floor':>7} {'wired':>7} {'wired/floor':>11} {'all Ready':>9} "
          f"{'gone (pers.)':>12} {'ephemeral done':>14} {'gone (eph.)':>11} "
          f"{'view wired':>10} {'view Ready':>10}")
    for r in rows:
        print(f"{r.size:>4} {r.floor:>7.1f} {r.wired:>7.1f} {r.wired / r.floor:>11.2f} {r.ready:>9.1f} "
              f"{r.gone_persistent:>12.1f} {r.ephemeral_done:>14.1f} {r.gone_ephemeral:>11.1f} "
              f"{r.wired_view:>10.1f} {r.ready_view:>10.1f}")
    if os.environ.get("FCC_BENCH_CSV"):
        with open(os.environ["FCC_BENCH_CSV"], "w") as f:
            f.write(",".join(Row._fields) + "\n")
            for row in rows:
                f.write(",".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in row) + "\n")
    print(f"  the first MiniCluster deleted after the install: gone in {first:.1f}s")
    for size in sizes:
        ratios = [r.wired / r.floor for r in rows if r.size == size]
        gone = [max(r.gone_persistent, r.gone_ephemeral) for r in rows if r.size == size]
        views = [r.wired_view / r.wired for r in rows if r.size == size]
        target = "  (target <= 1.3)" if size == 8 else ""
        view_target = "  (target <= 1.1)" if size == 8 else ""
        print(f"  size {size}: wired/floor {min(ratios):.2f}-{max(ratios):.2f}{target}; "
              f"slowest delete -> gone {max(gone):.1f}s (target <= 5); "
              f"view wired / Flux-in-image wired {min(views):.2f}-{max(views):.2f}{view_target}")
    print("  bytes written per pod for Flux: 0 with the view (a read-only bind of the node's copy)")


def broker_states(pod, ns):
    """When the pod's broker entered each state (flux dmesg: `<event>:
    <old>-><new>`), wall time (epoch s) by new state: join is the broker's
    start, init its parent reached, quorum rc1 done, run every rank in."""
    out = kubectl("exec", "-n", ns, pod, "--", "flux", "dmesg").stdout
    states = {}
    for m in re.finditer(r"^(\S+)Z broker\.\w+\[\d+\]: [\w-]+: ([\w-]+)->([\w-]+) ", out, re.M):
        when = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc)
        states.setdefault(m.group(3), when.timestamp())
    lines = [l for l in out.splitlines() if "->" in l]
    check("join" in states and "quorum" in states, f"{pod}: dmesg names join and quorum: {lines}")
    return states


def timed_phases(name, ns, size, create):
    """create(), then create -> each phase (s): every broker started (the
    last pod's `join`), rank 0's rc1 (its init -> quorum), wired (rank 0
    in `run`), every pod Ready."""
    t0 = time.time()
    create()
    wait_for(f"{name}: every pod Ready", lambda: ready_pods(name, ns, size), timeout=300, interval=0.2)
    ready = time.time() - t0
    states = [broker_states(p["metadata"]["name"], ns) for p in pods_of(name, ns)]
    check("run" in states[0], f"{name}: rank 0 never entered run")
    return {"started": max(s["join"] for s in states) - t0,
            "rc1": states[0]["quorum"] - states[0]["init"],
            "wired": states[0]["run"] - t0, "ready": ready}


def view_phases(name, ns, size, image):
    """timed_phases of a persistent MiniCluster of `image` (None: the Flux
    test image, fromImage); then deleted."""
    phases = timed_phases(name, ns, size, lambda: apply(minicluster(name, ns, size, image=image)))
    delete_and_time_gone(name, ns)
    return phases


def copied_view_objects(name, ns, size):
    """The Service and Job the controller renders for a busybox MiniCluster
    of the view, with the view delivered the peers' way (flux-operator's and
    Kubeflow Trainer's flux-view init container): an init container copies
    it from an image (here the driver's, which carries it) into an
    emptyDir, mounted where the driver's read-only bind would be. No such
    MiniCluster exists: the objects own nothing and are owned by nothing."""
    mc = minicluster(name, ns, size, image=app("app-busybox"))
    mc["metadata"]["uid"] = str(uuid.uuid4())
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(mc, f)
        f.flush()
        out = subprocess.run([os.environ["FCC_CONTROLLER"], "render", "-f", f.name],
                             capture_output=True, text=True, check=True).stdout
    objs = [d for d in yaml.safe_load_all(out) if d and d["kind"] in ("Service", "Job")]
    check(len(objs) == 2, f"render gave a Service and a Job: {out[:200]}")
    for obj in objs:
        obj["metadata"].pop("ownerReferences", None)
    job = next(o for o in objs if o["kind"] == "Job")
    job["spec"]["suspend"] = False
    pod = job["spec"]["template"]["spec"]
    pod["volumes"] = [v if v["name"] != "flux-view" else {"name": "flux-view", "emptyDir": {}}
                      for v in pod["volumes"]]
    pod["initContainers"] = [{
        "name": "flux-view", "image": driver_image(),
        "command": ["cp", "-R", f"{VIEWS_IN_DRIVER_IMAGE}/{VIEW}/.", "/mnt/flux/"],
        "volumeMounts": [{"name": "flux-view", "mountPath": "/mnt/flux"}],
        "resources": RESOURCES}]
    return objs


def copied_view_phases(name, ns, size):
    """timed_phases of copied_view_objects; then deleted."""
    objs = copied_view_objects(name, ns, size)
    try:
        phases = timed_phases(name, ns, size, lambda: [apply(o) for o in objs])
    except Exception:
        log(kubectl("describe", "pods", "-n", ns, "-l", f"minicluster.dev/name={name}",
                    check_rc=False).stdout[-3000:])
        log(kubectl("describe", "job", name, "-n", ns, check_rc=False).stdout[-1500:])
        raise
    uids = [p["metadata"]["uid"] for p in pods_of(name, ns)]
    kubectl("delete", "job", name, "-n", ns, "--cascade=foreground", "--wait=true", timeout=120)
    kubectl("delete", "service", name, "-n", ns)
    wait_gone(name, ns, uids)
    return phases


@contextlib.contextmanager
def admission_policies_unbound():
    """The install's admission policy bindings deleted, and put back after:
    they admit a Job with a cert volume only from minicluster-controller for
    a MiniCluster, which the copied-view Jobs are not."""
    saved = [b for b in json.loads(kubectl("get", "validatingadmissionpolicybindings", "-o",
                                           "json").stdout)["items"]
             if b["metadata"]["name"].endswith(".minicluster.dev")]
    for b in saved:
        kubectl("delete", "validatingadmissionpolicybinding", b["metadata"]["name"])
    try:
        yield
    finally:
        for b in saved:
            apply({k: v for k, v in b.items() if k != "status"} | {"metadata": {
                "name": b["metadata"]["name"], "labels": b["metadata"].get("labels", {})}})


def driver_view_copy_ms():
    """The driver's own figure for copying and verifying the view at start."""
    for pod in items("pods", "flux-curve-csi", "app.kubernetes.io/name=flux-curve-csi"):
        out = kubectl("logs", "-n", "flux-curve-csi", pod["metadata"]["name"], "-c", "driver",
                      check_rc=False).stdout
        m = re.search(r"copied to \S+ and verified in (\d+) ms", out)
        if m:
            return int(m.group(1))
    return None


def bench_view(work, sizes=SIZES, rounds=ROUNDS):
    """The view against Flux in the image (issue 50, item 4): per size and
    round, a persistent MiniCluster of the Flux test image (fromImage) and
    one of app-busybox from the view, one after the other."""
    ns = "view-bench"
    create_namespace(ns)
    # Each image's first container on the node unpacks its snapshot: not
    # in the rows.
    for label, image in (("image", None), ("view", app("app-busybox"))):
        apply(minicluster(f"warmup-{label}", ns, 1, image=image))
        wait_for("warmup Running", lambda: running_pods(f"warmup-{label}", ns, 1), timeout=300)
        delete_and_time_gone(f"warmup-{label}", ns)
    runs = collections.defaultdict(list)
    ways = (("image", lambda n, size: view_phases(n, ns, size, None)),
            ("view", lambda n, size: view_phases(n, ns, size, app("app-busybox"))),
            ("copy", lambda n, size: copied_view_phases(n, ns, size)))
    with admission_policies_unbound():
        for round_ in range(rounds):
            for size in sizes:
                for label, run in ways:
                    phases = run(f"{label}{size}r{round_}", size)
                    runs[(size, label)].append(phases)
                    log(f"size {size} {label}: " + " ".join(f"{k} {v:.2f}s" for k, v in phases.items()))
    print(f"\nThe view against Flux in the image, create -> phase, seconds, "
          f"median of {rounds} (min-max):")
    print(f"{'size':>4} {'from':>6} {'started':>17} {'rc1 (rank 0)':>17} {'wired':>17} "
          f"{'Ready':>17}")

    def cell(values):
        values = sorted(values)
        return f"{values[len(values) // 2]:5.2f} ({values[0]:.2f}-{values[-1]:.2f})"

    for size in sizes:
        for label, _ in ways:
            rs = runs[(size, label)]
            print(f"{size:>4} {label:>6} " + " ".join(
                f"{cell([r[k] for r in rs]):>17}" for k in ("started", "rc1", "wired", "ready")))
        ratio = sorted(v["wired"] / i["wired"] for v, i in zip(runs[(size, "view")],
                                                               runs[(size, "image")]))
        target = "  (target <= 1.1)" if size == 8 else ""
        print(f"     view/image wired: median {ratio[len(ratio) // 2]:.2f}, "
              f"{ratio[0]:.2f}-{ratio[-1]:.2f}{target}")
        saved = sorted(c["wired"] - v["wired"] for c, v in zip(runs[(size, "copy")],
                                                               runs[(size, "view")]))
        print(f"     copied view minus view, wired: median {saved[len(saved) // 2]:.2f}s, "
              f"{saved[0]:.2f}-{saved[-1]:.2f}s")
    copy_ms = driver_view_copy_ms()
    print("  the driver's copy of the view at its start: " +
          (f"{copy_ms} ms" if copy_ms is not None else "not in its log (copied by an earlier start)"))
    return runs


def submit_throughput(flux, jobs):
    """`jobs` one-core `true` jobs submitted at once to the instance whose
    `flux` this is, until the queue is empty: jobs per second."""
    t0 = time.monotonic()
    flux("submit", "--quiet", f"--cc=1-{jobs}", "-n1", "true")
    flux("queue", "drain", "--timeout=600")
    seconds = time.monotonic() - t0
    done = flux("jobs", "-a", "-f", "completed", "-no", "{id}").split()
    check(len(done) >= jobs, f"{len(done)} of {jobs} jobs completed")
    return jobs / seconds


def bench_scheduler(work, jobs=SCHED_JOBS):
    """Fluxion (fcfs) and sched-simple, each in one persistent MiniCluster
    of the busybox image (size 2, 2 cores a broker): jobs/s for `jobs`
    one-core `true` jobs."""
    ns = "sched-bench"
    create_namespace(ns)
    two = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "2"}}
    rates = {}
    for label, flux_spec in (("fluxion", {}), ("simple", {"scheduler": {"simple": True}})):
        name = f"sched-{label}"
        flux = persistent_lead(ns, name, size=2, exec_timeout=900, ready_timeout=300,
                               resources=two, flux=flux_spec)
        rates[label] = submit_throughput(flux, jobs)
        delete_and_time_gone(name, ns)
    print(f"\nScheduler throughput, {jobs} one-core `true` jobs, 4 cores (2 brokers x 2):")
    for label, rate in rates.items():
        print(f"  {label:>8}: {rate:.1f} jobs/s")
    return rates


def run_answers(ns, lead, size):
    """`flux run -N<size> hostname` from the lead printed every broker."""
    r = kubectl("exec", "-n", ns, lead, "--", "flux", "run", f"-N{size}", "hostname",
                check_rc=False, timeout=120)
    return r.returncode == 0 and len(set(r.stdout.split())) == size


def time_to_answer(ns, lead, size, lose, lost=lambda: True):
    """lose(), then until `lost()` and `flux run -N<size>` answers again (s)."""
    t0 = time.monotonic()
    lose()
    wait_for("the loss seen", lost, timeout=60, interval=0.1)
    while not run_answers(ns, lead, size):
        check(time.monotonic() - t0 < 300, "flux run never answered again")
        time.sleep(0.2)
    return time.monotonic() - t0


def new_index_pod(name, ns, index, old_uid):
    """The pod of `index` that replaced `old_uid`, once there is one."""
    return next((p for p in pods_of(name, ns) if p["metadata"]["uid"] != old_uid
                 and p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
                 == str(index)), None)


def lead_pod_lost(name, ns, size, lead):
    """Deletes the lead's pod; seconds until `flux run -N<size>` from the
    new lead answers on every broker."""
    t0 = time.monotonic()
    kubectl("delete", "pod", "-n", ns, lead["name"], "--wait=false")
    while True:
        new = new_index_pod(name, ns, 0, lead["uid"])
        if new and new["status"].get("phase") == "Running" and run_answers(
                ns, new["metadata"]["name"], size):
            return time.monotonic() - t0
        check(time.monotonic() - t0 < 300, "flux run never answered from a new lead")
        time.sleep(0.2)


def loss_round(work, ns, size, round_, times):
    """One new MiniCluster without state: a follower's broker, the lead's
    broker, a follower's pod, then the lead's pod lost; and one with
    spec.flux.state: its lead's pod lost."""
    name = f"loss-{size}-{round_}"
    apply(minicluster(name, ns, size, resources=RESOURCES))
    pods = wait_for(f"{name}: Ready", lambda: ready_pods(name, ns, size), timeout=300)
    lead, last = pods[0]["metadata"], pods[-1]["metadata"]
    wait_for(f"{name}: flux run", lambda: run_answers(ns, lead["name"], size), timeout=120)
    for kind, lose, lost in (
            ("follower broker SIGKILL", lambda: signal_broker(ns, last["name"]), lambda: True),
            ("lead broker SIGKILL", lambda: signal_broker(ns, lead["name"]), lambda: True),
            ("follower pod deleted", lambda: kubectl(
                "delete", "pod", "-n", ns, last["name"], "--wait=false"),
             lambda: new_index_pod(name, ns, size - 1, last["uid"]))):
        times[(size, kind)].append(time_to_answer(ns, lead["name"], size, lose, lost))
    times[(size, "lead pod deleted, no state")].append(lead_pod_lost(name, ns, size, lead))
    kubectl("delete", "miniclusters.minicluster.dev", name, "-n", ns)
    wait_gone(name, ns, [])

    name = f"state-{size}-{round_}"
    apply(minicluster(name, ns, size, resources=RESOURCES, flux=state_claim(work, ns, name)))
    pods = wait_for(f"{name}: Ready", lambda: ready_pods(name, ns, size), timeout=300)
    lead = pods[0]["metadata"]
    wait_for(f"{name}: flux run", lambda: run_answers(ns, lead["name"], size), timeout=120)
    times[(size, "lead pod deleted, state")].append(lead_pod_lost(name, ns, size, lead))
    kubectl("delete", "miniclusters.minicluster.dev", name, "-n", ns)
    wait_gone(name, ns, [])
    kubectl("delete", "pvc", name, "-n", ns)
    kubectl("delete", "pv", f"{ns}-{name}")
    for (s, kind), ts in times.items():
        if s == size:
            log(f"size {size}, {kind}: flux run -N{size} answers after {ts[-1]:.1f}s")


def bench_loss(work, rounds=LOSS_ROUNDS):
    """Issue 60: per size and round, new persistent MiniClusters of the Flux
    test image lose a broker or a pod (loss_round), each timed until `flux
    run -N<size>` from the lead answers on every broker again. New ones each
    round: the Job controller's back-off for an index doubles with each of
    its pods lost (10 s, 20 s, 40 s...)."""
    ns = "loss-bench"
    create_namespace(ns)
    times = collections.defaultdict(list)
    for size, n in rounds:
        for round_ in range(n):
            loss_round(work, ns, size, round_, times)
    print("\nUntil `flux run -N<size>` answers again after a loss (s):")
    for (size, kind), ts in times.items():
        ts = sorted(ts)
        print(f"  size {size}, {kind:>27}: median {ts[len(ts) // 2]:.1f} "
              f"(of {len(ts)}: {', '.join(f'{t:.1f}' for t in ts)})")
    return times


PARTS = {"lifecycle": bench_lifecycle, "view": bench_view, "scheduler": bench_scheduler,
         "loss": bench_loss}

if __name__ == "__main__":
    parts = os.environ.get("FCC_BENCH_PARTS", "lifecycle,view,scheduler,loss").split(",")
    main([PARTS[p] for p in parts], needs_controller=False, crd=False,
         node_images=all_images, setup=install)
