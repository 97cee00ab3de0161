#!/usr/bin/env python3
"""Three real nodes (scripts/controlplane --nodes=3; docs/internals/node.md,
"Several nodes"), issue 61: each node its own kubelet, containerd, mount
and network namespace, node IP and pod subnet, pods routed between nodes
with no NAT. The project is installed from deploy/ as on one node; its
DaemonSet runs a driver on every node.

A size-6 MiniCluster of an image without Flux, two brokers a node, forms
one instance from keys each node's own driver derived and runs MPI across
the nodes; with one node's driver given another master key its brokers
never join.

Env: FCC_DRIVER (the flux-curve-csi binary), FCC_KEEP=1.
"""

import atexit
import hashlib
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kueue"))
from node_lib import (DRIVER, KUBELET_PODS, NAMESPACE, archive_name, image_archive,  # noqa: E402
                      install, node_images)
from minicluster_node_test import minicluster, pods_of, ready_pods, running_pods  # noqa: E402
from view_node_test import check_one_world  # noqa: E402
from e2e_lib import (CONTROLPLANE, REPO, apply, check, check_eq, create_namespace, get, items,  # noqa: E402
                     kubectl, log, main, wait_for)

NODES = 3
# Two brokers fit a node of 2 CPUs beside the driver and the controller,
# three do not: the scheduler puts two on each node.
BROKER = {"requests": {"cpu": "800m", "memory": "64Mi"}, "limits": {"cpu": "1"}}


def images():
    archives = node_images()
    mpich = image_archive("app-mpich")
    os.environ["FCC_IMAGE_APP_MPICH"] = archive_name(mpich)
    return archives + [mpich]


def node_names():
    return os.environ["FCC_CP_NODES"].split(",")


def node_root(node):
    """The node's root as its own mount namespace has it (/ for the first
    node, which is this test's own)."""
    with open(os.path.join(os.environ["FCC_CP_DIR"], "state.json")) as f:
        pids = json.load(f)["pid"]
    k = node_names().index(node)
    return "/" if k == 0 else f"/proc/{pids[f'netns-{k}']}/root"


def node_mountinfo(node):
    root = node_root(node)
    with open("/proc/self/mountinfo" if root == "/" else os.path.join(os.path.dirname(root), "mountinfo")) as f:
        return [line.split() for line in f]


def curve_mount(node, pod_uid):
    """The options of the pod's cert volume in its node's mount table, if
    the driver there mounted it."""
    target = f"{KUBELET_PODS}/{pod_uid}/volumes/kubernetes.io~csi/curve/mount"
    for fields in node_mountinfo(node):
        right = fields[fields.index("-") + 1:]
        if fields[4] == target and right[0] == "tmpfs" and right[1] == DRIVER:
            return fields[5]
    return None


def cert_digest(node, pod_uid):
    path = f"{KUBELET_PODS}/{pod_uid}/volumes/kubernetes.io~csi/curve/mount/curve.cert"
    with open(node_root(node) + path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def check_runs_on_every_rank(ns, name, pods, when):
    out = kubectl("exec", "-n", ns, pods[0]["metadata"]["name"], "--", "flux", "run",
                  f"-N{len(pods)}", "hostname", timeout=120).stdout
    check_eq(sorted(out.split()), sorted(f"{name}-{i}" for i in range(len(pods))),
             f"flux run -N{len(pods)} {when}")


def delete_minicluster(name, ns):
    kubectl("delete", "miniclusters.minicluster.dev", name, "-n", ns)
    wait_for(f"{name}'s pods gone", lambda: not pods_of(name, ns), timeout=120)


def by_node(pods):
    placed = {}
    for p in pods:
        placed.setdefault(p["spec"]["nodeName"], []).append(p["metadata"]["name"])
    return placed


def test_a_driver_on_every_node(work):
    """The DaemonSet's driver runs and registered with kubelet on each node."""
    check_eq(len(node_names()), NODES, "nodes in the cluster")
    pods = items("pods", NAMESPACE, "app.kubernetes.io/component=node")
    check_eq(sorted(p["spec"]["nodeName"] for p in pods), sorted(node_names()), "a driver pod per node")
    for node in node_names():
        # kubelet lists the driver in its CSINode once the driver registered.
        wait_for(f"{DRIVER} in {node}'s CSINode", lambda: [
            d["name"] for d in (get("csinode", node) or {}).get("spec", {}).get("drivers") or []]
            == [DRIVER], timeout=60)


def test_one_instance_over_three_nodes(work):
    """Six brokers, two a node: each node's driver mounts its pods' certs
    (the same key derived three times), the instance forms, and one MPI
    world spans the nodes."""
    ns, name = "multi", "wide"
    create_namespace(ns)
    t0 = time.monotonic()
    apply(minicluster(name, ns, 6, image=os.environ["FCC_IMAGE_APP_MPICH"], resources=BROKER))
    pods = wait_for("six brokers Ready", lambda: ready_pods(name, ns, 6), timeout=300)
    log(f"size 6 over {NODES} nodes: create -> every broker Ready {time.monotonic() - t0:.1f}s")
    placed = by_node(pods)
    log(f"brokers by node: {json.dumps(placed, sort_keys=True)}")
    check_eq(sorted(len(v) for v in placed.values()), [2] * NODES, "brokers on each node")
    digests = set()
    for p in pods:
        node, uid = p["spec"]["nodeName"], p["metadata"]["uid"]
        options = curve_mount(node, uid)
        check(options is not None and "ro" in options.split(","),
              f"{p['metadata']['name']}'s cert mounted read-only by {node}'s driver: {options}")
        digests.add(cert_digest(node, uid))
    check_eq(len(digests), 1, "distinct curve.cert contents over the three nodes")
    lead = pods[0]["metadata"]["name"]
    out = kubectl("exec", "-n", ns, lead, "--", "flux", "run", "-N6", "-n6",
                  "/usr/local/bin/mpi-hello", timeout=120).stdout
    check_one_world(out, name, 6, hosts=6)
    log(f"MPI over {NODES} nodes: {out.strip().splitlines()[0]} ...")
    delete_minicluster(name, ns)
    # kubelet unpublishes and removes the pod dir after the API object is gone.
    wait_for("no cert volume and no pod dir of theirs left on any node", lambda: not any(
        curve_mount(p["spec"]["nodeName"], p["metadata"]["uid"])
        or os.path.exists(node_root(p["spec"]["nodeName"]) + f"{KUBELET_PODS}/{p['metadata']['uid']}")
        for p in pods), timeout=90)


def drivers_by_node():
    """{node: [(driver pod uid, Ready)]} of the driver DaemonSet's pods."""
    out = {}
    for p in items("pods", NAMESPACE, "app.kubernetes.io/component=node"):
        if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp"):
            ready = any(c["type"] == "Ready" and c["status"] == "True"
                        for c in p["status"].get("conditions", []))
            out.setdefault(p["spec"]["nodeName"], []).append((p["metadata"]["uid"], ready))
    return out


def test_driver_upgrade_rolls_under_a_running_minicluster(work):
    """An upgrade of the driver DaemonSet (a template change) while a
    size-6 MiniCluster runs over the three nodes: the drivers are replaced
    one node at a time (the manifest's maxUnavailable), every broker stays
    Ready in the same pod with the same cert, the instance runs on every
    rank after, and a broker pod replaced after the upgrade gets the same
    key from the new driver and rejoins."""
    ns, name = "multi-upgrade", "live"
    create_namespace(ns)
    apply(minicluster(name, ns, 6, image=os.environ["FCC_IMAGE_APP_MPICH"], resources=BROKER))
    pods = wait_for("six brokers Ready", lambda: ready_pods(name, ns, 6), timeout=300)
    before = {p["metadata"]["uid"]: cert_digest(p["spec"]["nodeName"], p["metadata"]["uid"])
              for p in pods}
    old_drivers = {uid for v in drivers_by_node().values() for uid, _ in v}
    t0 = time.monotonic()
    kubectl("-n", NAMESPACE, "patch", "daemonset", "flux-curve-csi-node", "--type=merge", "-p",
            json.dumps({"spec": {"template": {"metadata": {"annotations": {
                "fcc-test/upgrade": str(int(time.time()))}}}}}))
    most_down, brokers_unready = 0, set()
    while True:
        now = drivers_by_node()
        down = [n for n in node_names() if not any(ready for _, ready in now.get(n, []))]
        most_down = max(most_down, len(down))
        brokers_unready |= {p["metadata"]["name"] for p in pods_of(name, ns)
                            if not any(c["type"] == "Ready" and c["status"] == "True"
                                       for c in p["status"].get("conditions", []))}
        uids = {uid for v in now.values() for uid, _ in v}
        if len(down) == 0 and not uids & old_drivers and len(uids) == NODES:
            break
        check(time.monotonic() - t0 < 300, f"the upgrade rolled out in 5 minutes: {now}")
        time.sleep(0.5)
    log(f"driver upgrade over {NODES} nodes: {time.monotonic() - t0:.1f}s; nodes without a Ready "
        f"driver at once: at most {most_down}; brokers NotReady meanwhile: {sorted(brokers_unready) or 'none'}")
    check(most_down <= 1, f"one node at a time without a driver, not {most_down}")
    check_eq(sorted(brokers_unready), [], "brokers NotReady during the upgrade")
    after = pods_of(name, ns)
    check_eq({p["metadata"]["uid"]: cert_digest(p["spec"]["nodeName"], p["metadata"]["uid"])
              for p in after}, before, "each broker pod and its cert, after the upgrade")
    check_runs_on_every_rank(ns, name, after, "after the upgrade")
    victim = after[3]
    kubectl("delete", "pod", "-n", ns, victim["metadata"]["name"], "--wait=false")
    pods = wait_for("index 3 replaced and Ready", lambda: (
        lambda ps: ps if ps and ps[3]["metadata"]["uid"] != victim["metadata"]["uid"] else None)(
            ready_pods(name, ns, 6)), timeout=180)
    new = pods[3]
    check_eq(cert_digest(new["spec"]["nodeName"], new["metadata"]["uid"]), next(iter(set(before.values()))),
             f"the replaced broker's cert, from {new['spec']['nodeName']}'s new driver")
    delete_minicluster(name, ns)


def test_node_lost(work):
    """A node lost with brokers on it (its kubelet and containerd stopped,
    its containers killed, its Node deleted): the pod garbage collector
    deletes its pods, the Job replaces them under their indexes on the
    other nodes, they rejoin rank 0 and `flux run -N6` runs again; deleted,
    the MiniCluster leaves nothing mounted on the nodes that remain. Last:
    the node does not come back."""
    ns, name = "multi-loss", "loss"
    create_namespace(ns)
    # Three fit a node: room on two nodes for the lost one's brokers.
    small = {"requests": {"cpu": "500m", "memory": "64Mi"}, "limits": {"cpu": "1"}}
    apply(minicluster(name, ns, 6, image=os.environ["FCC_IMAGE_APP_MPICH"], resources=small))
    pods = wait_for("six brokers Ready", lambda: ready_pods(name, ns, 6), timeout=300)
    placed = by_node(pods)
    lead_node = pods[0]["spec"]["nodeName"]
    victim = min((n for n in node_names()[1:] if n != lead_node and placed.get(n)),
                 key=lambda n: len(placed[n]))
    lost = {i for i, p in enumerate(pods) if p["spec"]["nodeName"] == victim}
    log(f"brokers by node: {json.dumps(placed, sort_keys=True)}; losing {victim} (indexes {sorted(lost)})")
    t0 = time.monotonic()
    subprocess.run([CONTROLPLANE, "lose-node", os.environ["FCC_CP_DIR"],
                    str(node_names().index(victim))], check=True)
    kubectl("delete", "node", victim)

    def replaced():
        now = ready_pods(name, ns, 6)
        return now if now and all(now[i]["metadata"]["uid"] != pods[i]["metadata"]["uid"]
                                  for i in lost) else None
    now = wait_for(f"indexes {sorted(lost)} replaced on the other nodes and Ready", replaced, timeout=300)
    log(f"{victim} lost -> its brokers Ready elsewhere: {time.monotonic() - t0:.1f}s; "
        f"by node: {json.dumps(by_node(now), sort_keys=True)}")
    check(all(p["spec"]["nodeName"] != victim for p in now), "no broker on the lost node")
    lead = now[0]["metadata"]["name"]
    check_eq(lead, pods[0]["metadata"]["name"], "the lead pod, kept")
    check_runs_on_every_rank(ns, name, now, "after the loss")
    delete_minicluster(name, ns)
    left = [p for p in pods + now if p["spec"]["nodeName"] != victim]
    wait_for("nothing of theirs mounted on the nodes that remain", lambda: not any(
        curve_mount(p["spec"]["nodeName"], p["metadata"]["uid"]) for p in left), timeout=90)


RACKS = {"rack-a": 2, "rack-b": 1}  # nodes in each rack, in node order


def rack_of():
    names, out = node_names(), {}
    for rack, count in RACKS.items():
        for _ in range(count):
            out[names[len(out)]] = rack
    return out


def start_kueue_with_racks(work, ns):
    """Kueue (the project's build) with examples/kueue/topology.yaml: the
    nodes labelled into two racks, a Topology of racks and hosts, its
    flavor, a ClusterQueue and a LocalQueue in `ns`."""
    import kueue_test
    r = subprocess.run([os.path.join(REPO, "scripts", "build-kueue")], stdout=subprocess.PIPE,
                       text=True, check=True)
    kueue = kueue_test.start_kueue(r.stdout.strip().splitlines()[-1], work)
    for node, rack in rack_of().items():
        kubectl("label", "node", node, f"example.com/rack={rack}", "example.com/hpc-pool=flux")
    with open(os.path.join(REPO, "examples", "kueue", "topology.yaml")) as f:
        text = f.read().replace("namespace: default", f"namespace: {ns}")
    kubectl("apply", "-f", "-", input=text)
    return kueue


def queued_by_rack(name, ns, size, **topology):
    obj = minicluster(name, ns, size, image=os.environ["FCC_IMAGE_APP_MPICH"], resources=BROKER,
                      topology=topology)
    obj["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "rack-queue"}
    apply(obj)


def flux_racks(ns, lead):
    """{rack: hostlist} as `flux resource list` in the lead shows it."""
    out = kubectl("exec", "-n", ns, lead, "--", "flux", "resource", "list", "-no",
                  "{properties} {nodelist}", timeout=60).stdout
    return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)


def racks_used(pods):
    racks = rack_of()
    return sorted({racks[p["spec"]["nodeName"]] for p in pods})


def pending_why(name, ns):
    """Kueue's message on the MiniCluster's Workload while it is not admitted."""
    for w in items("workloads.kueue.x-k8s.io", ns):
        if w["metadata"].get("labels", {}).get("minicluster.dev/name") != name:
            continue
        for c in w.get("status", {}).get("conditions", []):
            if c["type"] == "QuotaReserved" and c["status"] == "False" and c.get("message"):
                return c["message"]
    return None


def test_kueue_places_by_rack(work):
    """Kueue's Topology-Aware Scheduling, through spec.topology, on three
    nodes in two racks (rack-a: two nodes, room for four brokers; rack-b:
    one node, two): a size-3 MiniCluster requiring one rack runs all in
    rack-a; a size-5 one preferring one rack spans both; a size-5 one
    requiring one rack is never admitted. The instances form and run on
    every rank (Kueue's topology gate and nodeSelector do not disturb the
    brokers)."""
    ns = "multi-racks"
    create_namespace(ns)
    both = minicluster("both", ns, 2, image=os.environ["FCC_IMAGE_APP_MPICH"],
                       topology={"required": "example.com/rack", "preferred": "example.com/rack"})
    r = kubectl("apply", "-f", "-", input=json.dumps(both), check_rc=False)
    check(r.returncode != 0 and "set one of required or preferred" in r.stderr,
          f"the API server refuses a topology both required and preferred: {r.stderr}")
    kueue = start_kueue_with_racks(work, ns)
    try:
        queued_by_rack("one-rack", ns, 3, required="example.com/rack")
        pods = wait_for("one-rack: three brokers Ready", lambda: ready_pods("one-rack", ns, 3),
                        timeout=240)
        log(f"required rack, size 3: {json.dumps(by_node(pods), sort_keys=True)}")
        check_eq(racks_used(pods), ["rack-a"], "racks of a MiniCluster requiring one rack")
        job = get("job", "one-rack", ns)
        check_eq(job["spec"]["template"]["metadata"]["annotations"].get(
            "kueue.x-k8s.io/podset-required-topology"), "example.com/rack", "the Job's topology request")
        check_runs_on_every_rank(ns, "one-rack", pods, "in one rack")
        racks = flux_racks(ns, pods[0]["metadata"]["name"])
        log(f"required rack, size 3: flux resource list: {racks}")
        check_eq(racks, {"rack-a": "one-rack-[0-2]"}, "the racks Flux shows")
        delete_minicluster("one-rack", ns)

        queued_by_rack("spread", ns, 5, preferred="example.com/rack")
        pods = wait_for("spread: five brokers Ready", lambda: ready_pods("spread", ns, 5), timeout=240)
        log(f"preferred rack, size 5: {json.dumps(by_node(pods), sort_keys=True)}")
        check_eq(racks_used(pods), ["rack-a", "rack-b"], "racks of a size-5 MiniCluster preferring one")
        check_runs_on_every_rank(ns, "spread", pods, "over two racks")
        # Each rank's rack, as Kueue placed it (lowest indexes first).
        want = {}
        for i, p in enumerate(pods):
            want.setdefault(rack_of()[p["spec"]["nodeName"]], []).append(i)
        racks = flux_racks(ns, pods[0]["metadata"]["name"])
        log(f"preferred rack, size 5: flux resource list: {racks}")
        check_eq(sorted(racks), sorted(want), "the racks Flux shows")
        for rack, indexes in want.items():
            out = kubectl("exec", "-n", ns, pods[0]["metadata"]["name"], "--", "flux", "run",
                          f"-N{len(indexes)}", f"--requires={rack}", "hostname", timeout=120).stdout
            check_eq(sorted(out.split()), sorted(f"spread-{i}" for i in indexes),
                     f"flux run --requires={rack}")
        check_jobs_kept_in_one_rack(ns, pods, want)
        delete_minicluster("spread", ns)

        queued_by_rack("too-big", ns, 5, required="example.com/rack")
        why = wait_for("too-big's Workload pending with Kueue's reason", lambda: pending_why("too-big", ns),
                       timeout=60)
        time.sleep(5)
        log(f"required rack, size 5: pending: {why}")
        check_eq(pods_of("too-big", ns), [], "pods of a MiniCluster no rack can hold")
        check(get("job", "too-big", ns)["spec"].get("suspend") is True, "too-big's Job still suspended")
        kubectl("delete", "miniclusters.minicluster.dev", "too-big", "-n", ns)

        # Slices: three brokers of 800m in one host's slice fit no node (two
        # a node), though the rack would hold them: Kueue keeps it pending.
        queued_by_rack("host-slice", ns, 3, preferred="example.com/rack",
                       slice={"required": "kubernetes.io/hostname", "size": 3})
        job = wait_for("host-slice's Job", lambda: get("job", "host-slice", ns), timeout=30)
        annotations = job["spec"]["template"]["metadata"]["annotations"]
        check_eq({k: annotations.get(k) for k in ("kueue.x-k8s.io/podset-slice-required-topology",
                                                  "kueue.x-k8s.io/podset-slice-size")},
                 {"kueue.x-k8s.io/podset-slice-required-topology": "kubernetes.io/hostname",
                  "kueue.x-k8s.io/podset-slice-size": "3"}, "the Job's slice request")
        why = wait_for("host-slice's Workload pending with Kueue's reason",
                       lambda: pending_why("host-slice", ns), timeout=60)
        time.sleep(5)
        log(f"a slice of 3 on one host: pending: {why}")
        check_eq(pods_of("host-slice", ns), [], "pods of a MiniCluster whose slice no host can hold")
        kubectl("delete", "miniclusters.minicluster.dev", "host-slice", "-n", ns)
    finally:
        # Kept running for the tests after: its Job webhooks (failurePolicy
        # Fail) would refuse every Job while it is down.
        atexit.register(kueue.stop)


def check_jobs_kept_in_one_rack(ns, pods, indexes_by_rack):
    """Fluxion's graph has the racks, and a job of nodes is placed within
    one rack when one has room for it now: a job of the larger rack's size
    runs on exactly that rack; with one of its nodes busy it no longer fits
    a rack and spreads; a two-node job then still stays in one rack."""
    lead = pods[0]["metadata"]["name"]

    def flux(*args, timeout=120):
        return kubectl("exec", "-n", ns, lead, "--", "flux", *args, timeout=timeout).stdout

    check("loaded with JGF reader" in flux("dmesg"), "Fluxion read the graph of racks (JGF)")
    rack_of_host = {f"spread-{i}": rack for rack, idx in indexes_by_rack.items() for i in idx}
    big = max(indexes_by_rack, key=lambda r: len(indexes_by_rack[r]))
    hosts = sorted(f"spread-{i}" for i in indexes_by_rack[big])
    placed = sorted(flux("run", f"-N{len(hosts)}", "hostname").split())
    log(f"flux run -N{len(hosts)}: {placed}")
    check_eq(placed, hosts, f"a job of {big}'s size placed on {big}")
    busy = flux("submit", "-N1", f"--requires=host:{hosts[0]}", "sleep", "inf").strip()
    try:
        flux("job", "wait-event", "-t", "60", busy, "start")
        spread = sorted(flux("run", f"-N{len(hosts)}", "hostname").split())
        log(f"{hosts[0]} busy: flux run -N{len(hosts)}: {spread}")
        check(len({rack_of_host[h] for h in spread}) == 2 and hosts[0] not in spread,
              f"with {hosts[0]} busy, a job of {big}'s size spreads over both racks: {spread}")
        two = sorted(flux("run", "-N2", "hostname").split())
        log(f"{hosts[0]} busy: flux run -N2: {two}")
        check(len({rack_of_host[h] for h in two}) == 1 and hosts[0] not in two,
              f"a two-node job in one rack: {two}")
    finally:
        flux("cancel", busy)


def test_bench_smoke(work):
    """bench/multinode_bench.py's measure once on these three nodes: proves
    it still measures what it prints (no timing asserted)."""
    sys.path.insert(0, os.path.join(REPO, "bench"))
    import multinode_bench
    multinode_bench.wired_rounds(1, NODES)


def driver_with_other_key(node):
    """The driver DaemonSet kept off `node`, and a copy of it on `node`
    alone whose master key Secret holds another key; returns the undo."""
    ds = get("daemonset", "flux-curve-csi-node", NAMESPACE)
    copy = {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "flux-curve-csi-node-other", "namespace": NAMESPACE},
            "spec": json.loads(json.dumps(ds["spec"]))}
    for labels in (copy["spec"]["selector"]["matchLabels"], copy["spec"]["template"]["metadata"]["labels"]):
        labels["fcc-test"] = "other-key"
    pod = copy["spec"]["template"]["spec"]
    pod["nodeSelector"] = {"kubernetes.io/hostname": node}
    for v in pod["volumes"]:
        if v.get("secret", {}).get("secretName") == "flux-curve-csi-master-key":
            v["secret"]["secretName"] = "flux-curve-csi-master-key-other"
    key = os.path.join(work_dir(), "other.key")
    with open(key, "wb") as f:
        f.write(os.urandom(64))
    kubectl("-n", NAMESPACE, "create", "secret", "generic", "flux-curve-csi-master-key-other",
            f"--from-file=master.key={key}")
    away = {"spec": {"template": {"spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [node]}]}]}}}}}}}
    kubectl("-n", NAMESPACE, "patch", "daemonset", "flux-curve-csi-node", "--type=merge",
            "-p", json.dumps(away))
    apply(copy)
    wait_for(f"the driver on {node} from the other key's DaemonSet, the first on the rest",
             lambda: rolled_out("flux-curve-csi-node", NODES - 1)
             and rolled_out("flux-curve-csi-node-other", 1), timeout=240)

    def undo():
        kubectl("-n", NAMESPACE, "delete", "daemonset", "flux-curve-csi-node-other")
        kubectl("-n", NAMESPACE, "delete", "secret", "flux-curve-csi-master-key-other")
        kubectl("-n", NAMESPACE, "patch", "daemonset", "flux-curve-csi-node", "--type=json",
                "-p", '[{"op": "remove", "path": "/spec/template/spec/affinity"}]')
        wait_for("the driver DaemonSet back on every node",
                 lambda: rolled_out("flux-curve-csi-node", NODES), timeout=240)
    return undo


def work_dir():
    return os.environ.get("FCC_E2E_WORK") or os.environ["FCC_CP_DIR"]


def rolled_out(name, want):
    st = (get("daemonset", name, NAMESPACE) or {}).get("status", {})
    return all(st.get(k) == want for k in ("desiredNumberScheduled", "numberReady",
                                           "updatedNumberScheduled", "numberAvailable"))


def test_another_key_on_one_node_never_joins(work):
    """fcc-node-2's driver derives from another master key: of a size-6
    MiniCluster, the brokers on the lead's side of the keys join and the
    others stay offline (their CURVE handshake fails), while each pod's
    volume mounted. What makes one instance over three nodes is each node's
    driver deriving the same key."""
    ns, name, odd = "multi-keys", "split", node_names()[2]
    create_namespace(ns)
    undo = driver_with_other_key(odd)
    try:
        apply(minicluster(name, ns, 6, image=os.environ["FCC_IMAGE_APP_MPICH"], resources=BROKER))
        pods = wait_for("six brokers Running", lambda: running_pods(name, ns, 6), timeout=240)
        on_odd = {i for i, p in enumerate(pods) if p["spec"]["nodeName"] == odd}
        check_eq(len(on_odd), 2, f"brokers on {odd}")
        joined = set(range(6)) - on_odd if 0 not in on_odd else on_odd
        lead = pods[0]["metadata"]["name"]

        def offline():
            out = kubectl("exec", "-n", ns, lead, "--", "flux", "overlay", "status", "--no-pretty",
                          check_rc=False, timeout=60).stdout
            states = dict(re.findall(r"^(\d+) \S+: (\w+)", out, re.M))
            return {int(r) for r, s in states.items() if s == "offline"}, out
        wait_for(f"ranks {sorted(joined - {0})} (the lead's key) joined rank 0",
                 lambda: offline()[1] and not (joined & offline()[0]), timeout=90)
        time.sleep(15)  # the others had as long, and 15 s more
        down, out = offline()
        log(f"another key on {odd} (ranks {sorted(on_odd)}): rank 0's overlay: {out.strip()}")
        check_eq(sorted(down), sorted(set(range(6)) - joined), "ranks offline on rank 0")
        check(all(curve_mount(p["spec"]["nodeName"], p["metadata"]["uid"]) for p in pods),
              "every broker's volume mounted by its node's driver")
        delete_minicluster(name, ns)
    finally:
        undo()


if __name__ == "__main__":
    main([test_a_driver_on_every_node, test_one_instance_over_three_nodes,
          test_driver_upgrade_rolls_under_a_running_minicluster,
          test_another_key_on_one_node_never_joins, test_kueue_places_by_rack, test_bench_smoke,
          test_node_lost],
         needs_controller=False, crd=False, node_images=images, setup=install, nodes=NODES)
