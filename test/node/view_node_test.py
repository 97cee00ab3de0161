#!/usr/bin/env python3
"""Bring your own image, on the real node: MiniClusters whose images have no
Flux run their brokers from the driver's Flux view (issue 39).

The project is installed from deploy/ as in minicluster_node_test.py; the
driver's image carries the view (scripts/image view), which the driver
copies to the node once and binds read-only into each broker pod. The
application images are built here from Debian's archive (scripts/image):
app-busybox (a static busybox and nothing else: no libc, no passwd),
app-mpich (MPICH and an MPI program, no Flux, no Python), app-openmpi,
app-openmpi-bullseye and app-openmpi5 (the same with Open MPI) and app-python
(Debian's python3, no Flux).

Env: FCC_DRIVER (the flux-curve-csi binary), FCC_KEEP=1.
"""

import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from node_lib import (KUBELET_PODS, NAMESPACE, archive_name, daemonset_ready,  # noqa: E402
                      driver_pids, driver_pod, image_archive, install, this_nodes_kubelet)
import minicluster_node_test  # noqa: E402
from minicluster_node_test import (index0_logs, minicluster, pods_of, ready_pods,  # noqa: E402
                                   state, wait_gone)
from e2e_lib import (apply, check, check_eq, create_namespace, get, items, kubectl,  # noqa: E402
                     log, main, wait_for)

APPS = ("app-busybox", "app-mpich", "app-openmpi", "app-openmpi-bullseye", "app-openmpi5",
        "app-python")
VIEW = "flux-core-0.88.0"


def app(name):
    return os.environ[f"FCC_IMAGE_{name.replace('-', '_').upper()}"]


def all_images():
    """The node's, the Flux test image (the benchmark's baseline) and the apps."""
    images = minicluster_node_test.all_images()
    for name in APPS:
        archive = image_archive(name)
        os.environ[f"FCC_IMAGE_{name.replace('-', '_').upper()}"] = archive_name(archive)
        images.append(archive)
    return images


def view_mounts(pod_uid):
    """(mount point, per-mount options) of the view volume of a pod, as the
    node's mount table has them."""
    found = []
    want = f"{KUBELET_PODS}/{pod_uid}/volumes/kubernetes.io~csi/flux-view/mount"
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split(" - ", 1)[0].split()
            if fields[4] == want:
                found.append((fields[4], fields[5].split(",")))
    return found


def all_view_mounts():
    with open("/proc/self/mountinfo") as f:
        return [l for l in f if "/volumes/kubernetes.io~csi/flux-view/mount" in l]


def run_ephemeral(ns, name, image, size, command, timeout=240, **spec):
    """Creates an ephemeral MiniCluster and waits for its end; index 0's log."""
    t0 = time.monotonic()
    apply(minicluster(name, ns, size, command, image=image, **spec))
    uids = set()

    def ended():
        uids.update(p["metadata"]["uid"] for p in pods_of(name, ns))
        return state(name, ns) in ("Succeeded", "Failed")
    wait_for(f"MiniCluster {name} ended", ended, timeout=timeout)
    out = index0_logs(name, ns)
    log(f"{name} ({image}, size {size}): {state(name, ns)} in {time.monotonic() - t0:.1f}s")
    check_eq(state(name, ns), "Succeeded", f"MiniCluster {name}: {out[-1500:]}")
    kubectl("delete", "miniclusters.minicluster.dev", name, "-n", ns)
    wait_gone(name, ns, uids)
    return out


def test_busybox_ephemeral(work):
    """An image with no libc at all runs `flux run -N3 hostname`."""
    ns = "view-busybox"
    create_namespace(ns)
    out = run_ephemeral(ns, "bb", app("app-busybox"), 3, ["flux", "run", "-N3", "hostname"])
    for i in range(3):
        check(f"bb-{i}\n" in out, f"index 0 printed bb-{i}: {out[-600:]}")


def test_busybox_persistent_and_driver_kill(work):
    """A persistent MiniCluster of the busybox image answers `flux run` as
    the fluxUser uid (no passwd entry); its jobs see the view's flux and
    nothing else of the view; the view is one read-only bind of one inode in
    every pod; the driver killed with -9 leaves the brokers working and the
    next pod mounting."""
    ns, name = "view-persistent", "pers"
    create_namespace(ns)
    apply(minicluster(name, ns, 3, image=app("app-busybox")))
    pods = wait_for(f"{name}: 3 pods Ready", lambda: ready_pods(name, ns, 3), timeout=180)
    lead = pods[0]["metadata"]["name"]

    def flux(*args):
        return kubectl("exec", "-n", ns, lead, "--", "flux", *args, timeout=90).stdout

    check_eq(flux("run", "-N3", "id", "-u").split(), ["1000"] * 3, "flux run -N3 id -u")
    # What a job's environment holds of the view.
    job_env = dict(l.split("=", 1) for l in flux("run", "-N1", "env").splitlines() if "=" in l)
    exec_env = dict(l.split("=", 1) for l in
                    kubectl("exec", "-n", ns, lead, "--", "env").stdout.splitlines() if "=" in l)
    for var in ("LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PYTHONHOME"):
        check(var not in job_env, f"{var} in a job's environment: {job_env.get(var)}")
    check_eq(job_env.get("PATH"), exec_env.get("PATH"), "a job's PATH is the container's")
    check(all("/opt/flux" not in p for p in job_env["PATH"].split(":")),
          f"nothing of the view on a job's PATH: {job_env['PATH']}")
    from_view = sorted(k for k, v in job_env.items() if "/opt/flux" in v)
    log(f"a job's variables naming the view (Flux's own): {from_view}")
    check_eq(flux("run", "-N1", "which", "flux").strip(), "/usr/local/bin/flux",
             "flux on a job's PATH")

    # On the node: a read-only, nosuid, nodev bind, the same inode in every pod.
    inodes = set()
    for p in pods:
        mounts = view_mounts(p["metadata"]["uid"])
        check_eq(len(mounts), 1, f"view mounts of {p['metadata']['name']}")
        for flag in ("ro", "nosuid", "nodev"):
            check(flag in mounts[0][1], f"{flag} in {mounts[0]}")
        st = os.stat(mounts[0][0])
        inodes.add((st.st_dev, st.st_ino))
    check_eq(len(inodes), 1, "one view inode shared by the three pods")

    # kill -9: kubelet restarts the container; brokers keep working.
    before = driver_pod()
    pids = driver_pids()
    check(pids, "the driver's process on the node")
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    wait_for("the driver container restarted and Ready", lambda: (
        (d := driver_pod()) and d["status"]["containerStatuses"][0]["restartCount"] >
        before["status"]["containerStatuses"][0]["restartCount"]
        and d["status"]["containerStatuses"][0].get("ready")), timeout=120)
    check_eq(sorted(flux("run", "-N3", "hostname").split()), [f"{name}-{i}" for i in range(3)],
             "flux run -N3 hostname after the driver's kill -9")
    check_eq(len(view_mounts(pods[2]["metadata"]["uid"])), 1, "the view still mounted")
    # The next pod mounts: index 2 replaced by a new MiniCluster of size 1.
    out = run_ephemeral(ns, "after-kill", app("app-busybox"), 1, ["flux", "run", "hostname"])
    check("after-kill-0\n" in out, f"a MiniCluster after the kill ran: {out[-400:]}")
    uids = [p["metadata"]["uid"] for p in pods]
    kubectl("delete", "miniclusters.minicluster.dev", name, "-n", ns)
    wait_gone(name, ns, uids)
    check_eq([view_mounts(u) for u in uids], [[], [], []], "view mounts after deletion")


def kubelet_mountinfo():
    """kubelet's mount namespace's mountinfo: where a pod's volume comes
    from, whatever namespace this test runs in."""
    return f"/proc/{this_nodes_kubelet()}/mountinfo"


def set_driver_env(value):
    """MOUNT_API on the DaemonSet ("" removes it), rolled out and Ready."""
    kubectl("set", "env", "-n", NAMESPACE, "daemonset/flux-curve-csi-node",
            f"MOUNT_API={value}" if value else "MOUNT_API-")
    kubectl("rollout", "status", "-n", NAMESPACE, "daemonset/flux-curve-csi-node",
            "--timeout=180s", timeout=200)
    wait_for("the driver DaemonSet Ready on the node", daemonset_ready, timeout=180)


def test_mount2_view_sealed_in_kubelets_namespace(work):
    """Issue 51: with mount(2) (--mount-api=mount, what a kernel before 5.12
    gets for views) the view bind is ro, nosuid, nodev in kubelet's mount
    namespace, not only in the driver's; and a view volume without readOnly
    is refused."""
    ns, name = "view-mount2", "m2"
    create_namespace(ns)
    set_driver_env("mount")
    try:
        logs = kubectl("logs", "-n", NAMESPACE, driver_pod()["metadata"]["name"]).stdout
        check("binding view volumes with mount(2)" in logs, f"the driver binds views with mount(2): {logs[-800:]}")
        apply(minicluster(name, ns, 1, image=app("app-busybox")))
        pods = wait_for(f"{name}: 1 pod Ready", lambda: ready_pods(name, ns, 1), timeout=180)
        uid = pods[0]["metadata"]["uid"]
        want = f"{KUBELET_PODS}/{uid}/volumes/kubernetes.io~csi/flux-view/mount"
        with open(kubelet_mountinfo()) as f:
            there = [l.split(" - ", 1)[0].split() for l in f]
        there = [fields[5].split(",") for fields in there if fields[4] == want]
        check_eq(len(there), 1, "the view's mounts in kubelet's namespace")
        for flag in ("ro", "nosuid", "nodev"):
            check(flag in there[0], f"{flag} in kubelet's view mount {there[0]}")
        kubectl("delete", "miniclusters.minicluster.dev", name, "-n", ns)
        wait_gone(name, ns, [uid])
        # A hand-made pod whose view volume lacks readOnly never mounts it.
        apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rw-view", "namespace": ns},
               "spec": {"containers": [{"name": "c", "image": app("app-busybox"),
                                        "command": ["/bin/sleep", "600"],
                                        "volumeMounts": [{"name": "flux-view", "mountPath": "/opt/flux"}]}],
                        "volumes": [{"name": "flux-view", "csi": {
                            "driver": "curve.minicluster.dev", "volumeAttributes": {"view": VIEW}}}]}})
        event = wait_for("rw-view's FailedMount", lambda: next(
            (e["message"] for e in items("events", ns) if e.get("reason") == "FailedMount"
             and e.get("involvedObject", {}).get("name") == "rw-view"), None), timeout=120)
        check("readonly must be true for a view volume" in event, f"rw-view's FailedMount: {event}")
        kubectl("delete", "pod", "rw-view", "-n", ns, "--wait=true", timeout=120)
    finally:
        set_driver_env("")


def check_one_world(out, name, size, hosts=3):
    """Every rank of one MPI_COMM_WORLD printed once, from each of `hosts`
    brokers' hosts (singletons would print "rank 0 of 1" `size` times)."""
    ranks = re.findall(r"rank (\d+) of (\d+) on (\S+)", out)
    check_eq(sorted(int(r) for r, _, _ in ranks), list(range(size)), f"MPI ranks: {out[-1200:]}")
    check_eq({n for _, n, _ in ranks}, {str(size)}, f"MPI world size: {out[-1200:]}")
    check_eq(sorted({h for _, _, h in ranks}), sorted(f"{name}-{i}" for i in range(hosts)), "MPI hosts")


def test_mpi(work):
    """Each MPI's own program, launched by Flux with no option: six ranks of
    one world on three hosts. MPICH (Debian 11) by PMI-1; Open MPI 4.1
    (Debian 12 and 11) and 5.0 (Debian 13) by PMIx, which the controller's
    job shell rc offers beside PMI-1 (flux-pmix, in the view). Flux
    schedules the cores the pod was granted (its CPU limit, here 2 each; the
    request stays small so three pods fit the test node)."""
    ns = "view-mpi"
    create_namespace(ns)
    for image, name in (("app-mpich", "mpich"), ("app-openmpi", "ompi4"),
                        ("app-openmpi-bullseye", "ompi4-d11"), ("app-openmpi5", "ompi5")):
        out = run_ephemeral(ns, name, app(image), 3,
                            ["flux", "run", "-N3", "-n6", "/usr/local/bin/mpi-hello"],
                            resources={"requests": {"cpu": "100m", "memory": "64Mi"},
                                       "limits": {"cpu": "2"}})
        check_one_world(out, name, 6)


def persistent_lead(ns, name, size=1, exec_timeout=90, ready_timeout=180, **spec):
    """A persistent MiniCluster of the busybox image, once every pod is
    Ready; `flux` in its lead pod."""
    apply(minicluster(name, ns, size, image=app("app-busybox"), **spec))
    pods = wait_for(f"{name}: Ready", lambda: ready_pods(name, ns, size), timeout=ready_timeout)
    lead = pods[0]["metadata"]["name"]

    def flux(*args, check_rc=True):
        return kubectl("exec", "-n", ns, lead, "--", "flux", *args, timeout=exec_timeout,
                       check_rc=check_rc).stdout
    return flux


def test_fluxion(work):
    """Fluxion schedules by default, with the spec's queue policy: a short
    job behind a blocked one runs at once under easy backfill and waits
    under fcfs; --exclusive takes the whole node; simple: true keeps
    sched-simple. Each instance has 3 cores (a CPU limit of 3)."""
    ns = "view-fluxion"
    create_namespace(ns)
    three = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "3"}}
    policies = {"fcfs": {}, "easy": {"scheduler": {"queuePolicy": "easy"}}}
    fluxes = {p: persistent_lead(ns, f"q-{p}", resources=three, flux=f)
              for p, f in policies.items()}
    modules = fluxes["fcfs"]("module", "list")
    for module in ("sched-fluxion-qmanager", "sched-fluxion-resource"):
        check(module in modules, f"{module} loaded: {modules}")
    check("sched-simple" not in modules, f"sched-simple not loaded: {modules}")
    check_eq(fluxes["fcfs"]("run", "--exclusive", "-N1", "sh", "-c",
                            "echo $FLUX_JOB_NNODES $(flux getattr size)").split(), ["1", "1"],
             "flux run --exclusive -N1")
    check("easy" in fluxes["easy"]("dmesg"), "qmanager's policy easy in the log")
    # Two of three cores busy for a while; a job for all three waits behind
    # it; a one-core job that ends long before is what backfill may run.
    states = {}
    for policy, flux in fluxes.items():
        flux("submit", "-n2", "-t", "5m", "sleep", "60")
        flux("submit", "-n3", "-t", "5m", "true")
        short = flux("submit", "-n1", "-t", "10s", "true").strip()
        time.sleep(5)
        states[policy] = flux("jobs", "-no", "{state}", short).strip()
        flux("cancel", "--all", check_rc=False)
    log(f"the short job after 5 s: {states}")
    check_eq(states, {"fcfs": "SCHED", "easy": "INACTIVE"},
             "a short job behind a blocked one: waits (fcfs), backfilled (easy)")

    simple = persistent_lead(ns, "simple", flux={"scheduler": {"simple": True}})
    modules = simple("module", "list")
    check("sched-simple" in modules and "fluxion" not in modules,
          f"simple: true loads sched-simple alone: {modules}")
    check_eq(simple("run", "hostname").strip(), "simple-0", "a job under sched-simple")
    # The benchmark's throughput run, small: it still measures what it says.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
    import lifecycle_bench
    for label, flux in (("fluxion", fluxes["fcfs"]), ("simple", simple)):
        log(f"{label}: {lifecycle_bench.submit_throughput(flux, 20):.1f} jobs/s (20 jobs)")
    kubectl("delete", "miniclusters.minicluster.dev", "--all", "-n", ns, "--wait=true")


def test_applications_own_python(work):
    """The image's python3 is the one a job runs, not the view's."""
    ns = "view-python"
    create_namespace(ns)
    out = run_ephemeral(ns, "py", app("app-python"), 1,
                        ["flux", "run", "python3", "-c", "import sys; print('prefix=' + sys.prefix)"])
    check("prefix=/usr\n" in out, f"the application's Python prefix: {out[-600:]}")
    check("prefix=/opt/flux" not in out, "the view's Python ran the job")


def test_lifecycle_bench_smoke(work):
    """bench/lifecycle_bench.py once at size 2, on this test's node: proves
    the benchmark still measures what it prints (no timing asserted)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
    import lifecycle_bench
    lifecycle_bench.bench_lifecycle(work, sizes=[2], rounds=1)


def test_nothing_left(work):
    check_eq(all_view_mounts(), [], "view mounts left on the node")


if __name__ == "__main__":
    main([test_busybox_ephemeral, test_busybox_persistent_and_driver_kill,
          test_mount2_view_sealed_in_kubelets_namespace, test_mpi, test_fluxion,
          test_applications_own_python, test_lifecycle_bench_smoke, test_nothing_left],
         needs_controller=False, crd=False, node_images=all_images, setup=install)
