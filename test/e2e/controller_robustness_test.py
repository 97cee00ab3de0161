#!/usr/bin/env python3
"""minicluster-controller robustness on a real control plane (issue 5, item 3).

- the CRD schema refuses invalid MiniClusters with a message naming the field;
- kube-apiserver restarts under the controller's watches: it reconnects,
  re-lists and reconciles what was created right after;
- etcd compacted past the controller's resourceVersion: its resumed watches
  get 410 Gone, it re-lists, and later changes are reconciled;
- two replicas with --leader-elect: only the leader writes, exactly one Job
  per MiniCluster under 100 concurrent creates; kill -9 the leader and the
  other takes over within the lease time; SIGTERM releases the Lease at once.

  test/e2e/controller_robustness_test.py [TEST...]
"""

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_lib import (CONTROLPLANE, Api, Controller, apply, check, check_eq,  # noqa: E402
                     create_namespace, get, items, kubectl, log, main, minicluster, patch,
                     wait_for)

LEASE_S = 15  # the controller's lease duration (leader_election.h)
RETRY_S = 2  # and its retry period


def state(ns, name):
    return ((get("miniclusters.minicluster.dev", name, ns) or {}).get("status") or {}).get("state")


def running_with_job(ns, name, timeout=60):
    wait_for(f"Job {ns}/{name} unsuspended",
             lambda: (get("job", name, ns) or {}).get("spec", {}).get("suspend") is False,
             timeout=timeout)
    wait_for(f"MiniCluster {ns}/{name} Running", lambda: state(ns, name) == "Running",
             timeout=timeout)


def controlplane(*args, timeout=120):
    r = subprocess.run([CONTROLPLANE, *args], capture_output=True, text=True, timeout=timeout)
    check(r.returncode == 0, f"controlplane {' '.join(args)}: {r.stderr.strip()[-500:]}")


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie until the harness reaps it: count it as gone.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


def test_schema_refuses_invalid(work):
    ns = "e2e-invalid"
    create_namespace(ns)
    cases = [
        ("size 0", minicluster("bad-size", ns, size=0),
         ["spec.size", "should be greater than or equal to 1"]),
        ("missing image", {**minicluster("bad-image", ns),
                           "spec": {"size": 2}},
         ["spec.image", "Required value"]),
        ("empty image", minicluster("empty-image", ns, image=""),
         ["spec.image", "at least 1 chars long"]),
        ("brokerPort 70000", minicluster("bad-port", ns, brokerPort=70000),
         ["spec.brokerPort", "should be less than or equal to 65535"]),
        ("brokerPort 0", minicluster("zero-port", ns, brokerPort=0),
         ["spec.brokerPort", "should be greater than or equal to 1"]),
        ("name not a DNS-1035 label", minicluster("1bad", ns),
         ["metadata.name must be a DNS-1035 label"]),
        ("empty command", minicluster("bad-cmd", ns, command=[]),
         ["spec.command"]),
    ]
    # minicluster() drops a falsy command; set the empty one here.
    overrides = {"empty command": {"command": []}}
    for what, obj, want in cases:
        obj["spec"].update(overrides.get(what, {}))
        r = kubectl("apply", "-f", "-", input=json.dumps(obj), check_rc=False)
        check(r.returncode != 0, f"{what}: accepted by the API server")
        for text in want:
            check(text in r.stderr, f"{what}: message lacks {text!r}: {r.stderr.strip()}")
        line = next(ln for ln in r.stderr.splitlines() if want[0] in ln)
        log(f"refused {what}: {line.strip()[:200]}")
    check_eq(items("miniclusters", ns), [], "stored MiniClusters")
    # Immutable fields: the CEL rule names the field to fix.
    apply(minicluster("fixed", ns, size=2))
    r = kubectl("patch", "miniclusters.minicluster.dev", "fixed", "-n", ns, "--type=merge",
                "-p", '{"spec":{"size":3}}', check_rc=False)
    check(r.returncode != 0 and "spec.size is immutable" in r.stderr,
          f"size change not refused clearly: {r.stderr.strip()}")
    # Ephemeral <-> persistent: command's own rule does not run when the
    # field comes or goes; the spec-level rule does.
    apply(minicluster("ephemeral", ns, size=2, command=["true"]))
    changes = (("fixed", '{"spec":{"command":["true"]}}', "added"),
               ("ephemeral", '{"spec":{"command":null}}', "removed"))
    for name, patch_json, how in changes:
        r = kubectl("patch", "miniclusters.minicluster.dev", name, "-n", ns, "--type=merge",
                    "-p", patch_json, check_rc=False)
        check(r.returncode != 0 and "spec.command cannot be added or removed" in r.stderr,
              f"command {how} not refused clearly: {r.stderr.strip()}")
        log(f"refused spec.command {how}")


def test_apiserver_restart(work):
    ns = "e2e-restart"
    create_namespace(ns)
    ctl = Controller(work, "restart")
    ctl.wait_ready()
    apply(minicluster("before", ns, size=1))
    running_with_job(ns, "before")

    with open(os.path.join(os.environ["FCC_CP_DIR"], "state.json")) as f:
        old_pid = json.load(f)["pid"]["kube-apiserver"]
    t0 = time.monotonic()
    restart = subprocess.Popen([CONTROLPLANE, "restart", os.environ["FCC_CP_DIR"], "kube-apiserver"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for("the old kube-apiserver to exit", lambda: not pid_alive(old_pid), timeout=60)
    down = time.monotonic() - t0
    # Create while it is down, retrying until the new server takes writes
    # (its watch caches are still filling; the controller is reconnecting).
    def create_after():
        r = kubectl("apply", "-f", "-", input=json.dumps(
            minicluster("after", ns, size=1)), check_rc=False, timeout=20)
        return r.returncode == 0
    wait_for("the restarted API server to accept a MiniCluster", create_after, timeout=90, interval=0.2)
    created = time.monotonic() - t0
    _, err = restart.communicate(timeout=120)
    check(restart.returncode == 0, f"restart failed: {err[-500:]}")
    # A change to an old object made meanwhile is seen too.
    patch("minicluster", "before", ns, {"spec": {"suspend": True}})
    running_with_job(ns, "after", timeout=90)
    wait_for("Job before suspended", lambda: get("job", "before", ns)["spec"]["suspend"] is True,
             timeout=60)
    check(ctl.alive(), "controller exited across the restart")
    check(ctl.count(r"watch \S+: .*(Couldn't connect|503|Connection refused|Server returned nothing)") > 0,
          "controller log shows no broken watch")
    check(ctl.count(r"^.* debug listed \d+ miniclusters") >= 2, "no re-list of miniclusters")
    check(ctl.healthz("/healthz") and ctl.healthz("/readyz"), "health after restart")
    log(f"restart: server down at {down:.1f}s, MiniCluster created at {created:.1f}s, reconciled; "
        f"{ctl.count('re-listing')} re-lists")


def test_compaction_410(work):
    ns = "e2e-compact"
    create_namespace(ns)
    ctl = Controller(work, "compact")
    ctl.wait_ready()
    apply(minicluster("one", ns, size=1))
    running_with_job(ns, "one")
    time.sleep(1)
    relists = ctl.count(r"resourceVersion too old, re-listing")
    # Move etcd's revision past the controller's resourceVersion with writes
    # it does not watch, then compact there.
    for i in range(5):
        kubectl("create", "configmap", f"bump-{i}", "-n", ns)
    controlplane("compact", os.environ["FCC_CP_DIR"])
    # A live watch is served from the API server's watch cache, which keeps
    # its own history; the controller's watches resume from its (now
    # compacted) resourceVersion when the API server comes back: 410.
    controlplane("restart", os.environ["FCC_CP_DIR"], "kube-apiserver")
    wait_for("410 re-lists of miniclusters, jobs and services", lambda: all(
        ctl.count(rf"watch {r}: resourceVersion too old, re-listing") > 0
        for r in ("miniclusters", "jobs", "services")), timeout=90)
    check(ctl.count(r"resourceVersion too old, re-listing") >= relists + 3, "fewer than 3 re-lists")
    apply(minicluster("two", ns, size=1))
    running_with_job(ns, "two", timeout=60)
    patch("minicluster", "one", ns, {"spec": {"suspend": True}})
    wait_for("Job one suspended", lambda: get("job", "one", ns)["spec"]["suspend"] is True)
    check(ctl.alive(), "controller exited")
    log("compaction: watches got 410, re-listed, later changes reconciled")


def test_watch_ended_by_server(work):
    """The API server ends each watch after --watch-timeout-seconds: the
    controller resumes from its resourceVersion (no re-list) and reconciles."""
    ns = "e2e-rewatch"
    create_namespace(ns)
    ctl = Controller(work, "rewatch", "--watch-timeout-seconds", "2")
    ctl.wait_ready()
    wait_for("3 watches of miniclusters ended and resumed",
             lambda: ctl.count(r"watch miniclusters: ended by the server; resuming") >= 3, timeout=30)
    apply(minicluster("late", ns, size=1))
    running_with_job(ns, "late")
    for r in ("miniclusters", "jobs", "services"):
        check_eq(ctl.count(rf"debug listed \d+ {r} "), 1, f"lists of {r}")
    check_eq(ctl.count(r" warning "), 0, "warnings in the controller log")
    log(f"{ctl.count('ended by the server')} watches ended by the server and resumed without re-list")


def leader(ctls, lease_ns):
    lease = get("lease", "mc-e2e", lease_ns)
    holder = (lease or {}).get("spec", {}).get("holderIdentity")
    for c in ctls:
        if c.alive() and holder and f"as {holder}" in c.text():
            return c
    return None


def test_leader_election(work):
    ns, lease_ns = "e2e-le", "e2e-le-system"
    create_namespace(ns)
    create_namespace(lease_ns)
    args = ["--leader-elect", "--leader-election-namespace", lease_ns,
            "--leader-election-id", "mc-e2e", "--workers", "4"]
    a, b = Controller(work, "replica-a", *args), Controller(work, "replica-b", *args)
    first = wait_for("a leader", lambda: leader([a, b], lease_ns), timeout=30)
    other = b if first is a else a
    time.sleep(3)  # the follower keeps waiting
    check(other.count("waiting for lease") == 1 and other.count("acquired lease") == 0,
          "the follower also acquired the lease")

    # 100 concurrent creates through the API.
    api = Api(work)
    names = [f"mc-{i:03d}" for i in range(100)]

    def create(name):
        return api.request("POST", f"/apis/minicluster.dev/v1alpha1/namespaces/{ns}/miniclusters",
                           minicluster(name, ns, size=1))[0]

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=25) as pool:
        codes = list(pool.map(create, names))
    check_eq(sorted(set(codes)), [201], "create status codes")
    wait_for("100 Jobs", lambda: len(items("jobs", ns)) >= 100, timeout=180, interval=1)
    wait_for("100 MiniClusters Running", lambda: sum(
        (m.get("status") or {}).get("state") == "Running" for m in items("miniclusters", ns)) == 100,
        timeout=180, interval=1)
    took = time.monotonic() - t0
    mcs = {m["metadata"]["name"]: m["metadata"]["uid"] for m in items("miniclusters", ns)}
    jobs = items("jobs", ns)
    check_eq(len(jobs), 100, "number of Jobs")
    for job in jobs:
        owners = [r for r in job["metadata"].get("ownerReferences", []) if r.get("controller")]
        check_eq([(r["name"], r["uid"]) for r in owners],
                 [(job["metadata"]["name"], mcs[job["metadata"]["name"]])],
                 f"controller of Job {job['metadata']['name']}")
    check_eq(len(items("services", ns, "minicluster.dev/name")), 100, "number of Services")
    check(len(first.actions()) >= 300, f"leader made only {len(first.actions())} writes")
    check_eq(other.actions(), [], "writes by the follower")
    log(f"100 concurrent creates: 100 Jobs, 100 Running in {took:.1f}s, "
        f"{len(first.actions())} writes, all by {first.name}; none by {other.name}")

    # kill -9 the leader: it cannot release the Lease; the follower waits
    # for it to expire.
    t0 = time.monotonic()
    first.kill(signal.SIGKILL)
    wait_for(f"{other.name} to take over", lambda: other.count("acquired lease") == 1,
             timeout=LEASE_S + 15, interval=0.2)
    takeover = time.monotonic() - t0
    # The follower takes over once the record it last saw has stayed the
    # same for a lease duration; it polls every 2 s (RETRY) and the last
    # renewal was up to 2 s before the kill: at most LEASE_S + 2*RETRY.
    check(takeover <= LEASE_S + 2 * RETRY_S + 4, f"takeover took {takeover:.1f}s")
    apply(minicluster("after-failover", ns, size=1))
    running_with_job(ns, "after-failover")
    check(any("after-failover" in line for line in other.actions()), "new leader did not act")
    log(f"leader killed (SIGKILL): {other.name} took over in {takeover:.1f}s and reconciles")

    # SIGTERM: the leader releases the Lease, a new replica takes over at once.
    c = Controller(work, "replica-c", *args)
    wait_for("replica-c waiting", lambda: c.count("waiting for lease") == 1, timeout=30)
    time.sleep(2)
    t0 = time.monotonic()
    check_eq(other.kill(signal.SIGTERM), 0, f"{other.name} exit code on SIGTERM")
    check("released lease" in other.text(), "the lease was not released")
    wait_for("replica-c to take over", lambda: c.count("acquired lease") == 1, timeout=15,
             interval=0.2)
    handover = time.monotonic() - t0
    check(handover < 6, f"handover after release took {handover:.1f}s")
    patch("minicluster", "after-failover", ns, {"spec": {"suspend": True}})
    wait_for("Job after-failover suspended by replica-c",
             lambda: get("job", "after-failover", ns)["spec"]["suspend"] is True)
    log(f"leader stopped (SIGTERM): lease released, replica-c took over in {handover:.1f}s")


if __name__ == "__main__":
    main([test_schema_refuses_invalid, test_apiserver_restart, test_compaction_410,
          test_watch_ended_by_server, test_leader_election])
