#!/usr/bin/env python3
"""What the network between nodes costs a MiniCluster (issue 61): create ->
wired (rank 0's broker in state `run`, which it reaches only once every rank
joined) and create -> every pod Ready, for a size-6 persistent MiniCluster
of the MPICH image (brokers from each node's Flux view), on one node and on
three nodes (scripts/controlplane --nodes=3, two brokers a node), five
rounds each; and what each node costs the harness at start.

Each cluster is started by this script (as the node tests start theirs),
the project installed from deploy/. Prints numbers; asserts only that what
it measures happened.

  unshare -m --propagation private bench/multinode_bench.py
Env: FCC_DRIVER (the flux-curve-csi binary), FCC_BENCH_ROUNDS (default 5).
"""

import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "node"))
sys.path.insert(0, HERE)
from lifecycle_bench import delete_and_time_gone, dmesg_run_time  # noqa: E402
from minicluster_node_test import minicluster, pods_of, ready_pods  # noqa: E402
from node_lib import install  # noqa: E402
from multinode_node_test import by_node, images  # noqa: E402
from e2e_lib import apply, check, create_namespace, log, main, wait_for  # noqa: E402

ROUNDS = int(os.environ.get("FCC_BENCH_ROUNDS", "5"))
SIZE = 6
# Three nodes: two brokers fit a node, three do not (multinode_node_test).
# One node: all six fit.
REQUESTS = {1: "100m", 3: "800m"}


def wired_rounds(rounds, nodes):
    """[(wired s, every pod Ready s, brokers on each node)] of `rounds`
    size-6 MiniClusters made one after the other."""
    ns = "bench-multinode"
    create_namespace(ns)
    rows = []
    for r in range(rounds):
        name = f"wide{r}"
        resources = {"requests": {"cpu": REQUESTS[nodes], "memory": "64Mi"}, "limits": {"cpu": "1"}}
        t0 = time.time()
        apply(minicluster(name, ns, SIZE, image=os.environ["FCC_IMAGE_APP_MPICH"], resources=resources))
        pods = wait_for(f"{name}: every pod Ready", lambda: ready_pods(name, ns, SIZE), timeout=300,
                        interval=0.2)
        ready = time.time() - t0
        wired = dmesg_run_time(pods_of(name, ns)[0]["metadata"]["name"], ns) - t0
        spread = sorted(len(v) for v in by_node(pods).values())
        check(len(spread) == nodes, f"{name} on {nodes} nodes: {spread}")
        delete_and_time_gone(name, ns)
        rows.append((wired, ready, spread))
        log(f"{nodes} node(s), round {r + 1}: wired {wired:.1f}s, Ready {ready:.1f}s, brokers a node {spread}")
    return rows


def bench_under_cluster(work):
    nodes = len(os.environ["FCC_CP_NODES"].split(","))
    rows = wired_rounds(ROUNDS, nodes)
    print("FCC_BENCH_ROWS " + json.dumps({"nodes": nodes, "rows": rows}), flush=True)


def start_cost(out):
    """Seconds of `controlplane: X ready in Ns` / `imported ... in Ns` per
    node after the first, from the harness's output."""
    per = {}
    for m in re.finditer(r"controlplane: (netns|containerd|kubelet)-(\d+) ready in ([\d.]+)s", out):
        per.setdefault(m.group(2), [0.0, 0.0])[0] += float(m.group(3))
    for m in re.finditer(r"imported \S+ into fcc-node-(\d+) in ([\d.]+)s", out):
        per.setdefault(m.group(1), [0.0, 0.0])[1] += float(m.group(2))
    up = re.search(r"cluster of \d+ nodes? up in ([\d.]+)s", out)
    return per, float(up.group(1)) if up else None


def compare():
    results = {}
    for nodes in (1, 3):
        env = {**os.environ, "FCC_BENCH_NODES": str(nodes)}
        r = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        sys.stdout.write(r.stdout)
        found = re.search(r"^FCC_BENCH_ROWS (.*)$", r.stdout, re.M)
        if r.returncode != 0 or not found:
            sys.exit(f"multinode_bench: the {nodes}-node run failed")
        results[nodes] = (json.loads(found.group(1))["rows"], start_cost(r.stdout))
    print(f"\nSize-{SIZE} persistent MiniCluster, MPICH image, {ROUNDS} rounds, seconds "
          "(median, min-max):")
    print(f"{'nodes':>5} {'wired':>18} {'every pod Ready':>18} {'cluster up':>10}")
    for nodes, (rows, (_, up)) in results.items():
        def cell(values):
            return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"
        print(f"{nodes:>5} {cell([w for w, _, _ in rows]):>18} {cell([r for _, r, _ in rows]):>18} "
              f"{up if up is not None else '?':>10}")
    per, _ = results[3][1]
    for k, (ready, imported) in sorted(per.items()):
        print(f"node {k} after the first: namespaces, containerd and kubelet {ready:.1f}s; "
              f"its images imported {imported:.1f}s")


if __name__ == "__main__":
    if "FCC_CP_DIR" not in os.environ and "FCC_BENCH_NODES" not in os.environ:
        compare()
    else:
        main([bench_under_cluster], needs_controller=False, crd=False, node_images=images,
             setup=install, nodes=int(os.environ.get("FCC_BENCH_NODES", "3")))
