#!/usr/bin/env python3
"""The README's first command, in its cluster mode, as a user runs it
(`scripts/demo --skip-build` over the build under test), judged by what it
prints: every step ran, the queued MiniCluster waited while two ran, all
three ended as shown (the ephemeral two Succeeded with their output, the
persistent one answered `flux run`), no secret key was found, and nothing
was left mounted or running. Then checked again from outside: no mount and
no directory of the demo left on this machine.

With --racks, `scripts/demo --racks`: three nodes in two racks, one
MiniCluster placed by rack, Flux showing each rank's rack as Kueue placed
it and running a job of a rack's size within that rack.

Env: FCC_DRIVER (the flux-curve-csi binary: its build dir is the demo's).
"""

import glob
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fail(msg):
    sys.exit(f"demo_test: {msg}")


def run_demo(*args):
    """scripts/demo's output, having checked that it ran every step."""
    driver = os.environ.get("FCC_DRIVER") or os.path.join(REPO, "build", "src", "driver", "flux-curve-csi")
    build_dir = os.path.dirname(os.path.dirname(os.path.dirname(driver)))
    r = subprocess.run([os.path.join(REPO, "scripts", "demo"), *args, "--skip-build"],
                       env={**os.environ, "BUILD_DIR": build_dir},
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1500)
    out = r.stdout
    print(out, flush=True)
    if r.returncode != 0:
        fail(f"scripts/demo exited {r.returncode}")
    total = 11 if "--racks" in args else 16
    steps = re.findall(r"^\[(\d+)/(\d+)\] ", out, re.M)
    if [int(n) for n, _ in steps] != list(range(1, total + 1)) or {t for _, t in steps} != {str(total)}:
        fail(f"steps printed: {steps}, want 1..{total} of {total}")
    for line in ("processes left in the cluster's network namespaces: 0",
                 "mounts of the demo left in this machine's mount table: 0"):
        if line not in out:
            fail(f"no line {line!r}")
    return out


def check_nothing_left(before):
    left = set(glob.glob("/tmp/fcc-demo*")) - before
    if left:
        fail(f"the demo left {sorted(left)}")
    with open("/proc/self/mountinfo") as f:
        mounts = [l for l in f if "fcc-demo" in l]
    if mounts:
        fail(f"the demo left mounts: {mounts}")


def racks():
    before = set(glob.glob("/tmp/fcc-demo*"))
    out = run_demo("--racks")
    if "demo: mode racks (--racks was given)" not in out:
        fail("the demo did not say it ran its racks mode")
    placed = re.search(r"Kueue placed indexes by rack: rack-a: (.*), rack-b: (.*)\n", out)
    if not placed or len(placed.group(1).split()) + len(placed.group(2).split()) != 5:
        fail("no line shows five brokers placed over rack-a and rack-b")
    shown = re.search(r"each rank's rack as Flux shows it: rack-a: (\S+), rack-b: (\S+)\n", out)
    if not shown:
        fail("no line shows the racks as Flux shows them")
    if not re.search(r"flux run -N\d ran within rack-a", out):
        fail("no line shows a job of rack-a's size run within rack-a")
    if "CSI volumes (certs and Flux views) left mounted on the nodes: 0" not in out:
        fail("no line shows nothing left mounted on the nodes")
    check_nothing_left(before)
    print("demo_test: racks ok", flush=True)


def main():
    if sys.argv[1:] == ["--racks"]:
        return racks()
    before = set(glob.glob("/tmp/fcc-demo*"))
    out = run_demo()
    if "demo: mode cluster (the default)" not in out:
        fail("the demo did not say it ran its cluster mode")
    # The queue: sweep waited with no pod while hello and notebook ran.
    if not re.search(r"^ +sweep is Queued: ", out, re.M) or "the queued MiniCluster waited" not in out:
        fail("no line shows sweep waiting in the queue")
    tables = re.findall(r"\$ kubectl get miniclusters.minicluster.dev -A\n((?: {6}.*\n)+)", out)
    if not tables:
        fail("no `kubectl get miniclusters` table")
    last = {row.split()[1]: row.split()[3] for row in tables[-1].splitlines()[1:]}
    if last != {"hello": "Succeeded", "notebook": "Running", "sweep": "Succeeded"}:
        fail(f"the last table's states: {last}")
    # Output from index 0 (both ranks' lines), and `flux run` in the persistent one.
    for pattern in (r"hello from hello-[01]\n", r"sweep task [01] on sweep-[01]\n",
                    r"notebook job on notebook-[01]\n"):
        if len(re.findall(pattern, out)) != 2:
            fail(f"want two lines of {pattern!r}")
    secrets = re.findall(r"\(\d+ files\): (\d+) times", out)
    if len(secrets) != 3 or any(n != "0" for n in secrets):
        fail(f"the secret key search: {secrets}")
    if "CSI volumes (certs and Flux views) left mounted on the node: 0" not in out:
        fail("no line shows nothing left mounted on the node")
    check_nothing_left(before)
    print("demo_test: ok", flush=True)


if __name__ == "__main__":
    main()
