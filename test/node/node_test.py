#!/usr/bin/env python3
"""The driver on a real node: kubelet and containerd mount its volumes.

The project is installed as a user installs it (docs/getting-started.md's master key
Secret, then `kubectl apply -k` of deploy/ with only the image set by
`kustomize edit set image`, and the admission policies left out by the
documented opt-out: these pods are made by hand, which the policies refuse) on a cluster of the real control plane plus one
real node (scripts/controlplane --node: kube-scheduler, containerd, runc, the
CNI bridge, kubelet), with images built here by scripts/image. Everything
runs in a network and mount namespace of the test's own.

Env: FCC_DRIVER (the flux-curve-csi binary: its build dir feeds the image,
and it computes the expected certs), FCC_KEEP=1.
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from node_lib import *  # noqa: E402,F401,F403
from e2e_lib import (REPO, apply, check, check_eq, create_namespace, get, kubectl,  # noqa: E402
                     log, main, wait_for)


# ------------------------------------------------------------------ tests

def test_registration(work):
    check(get("csidriver", DRIVER) is not None, "kubectl get csidriver shows the driver")
    def drivers():
        csinode = get("csinode", NODE) or {"spec": {}}
        return {d["name"]: d for d in csinode["spec"].get("drivers") or []}
    drivers = wait_for("CSINode lists the driver", lambda: DRIVER in drivers() and drivers(), timeout=60)
    check(DRIVER in drivers, f"CSINode {NODE} drivers: {list(drivers)}")
    check_eq(drivers[DRIVER]["nodeID"], NODE, "CSINode nodeID (NodeGetInfo)")
    logs = kubectl("logs", "-n", NAMESPACE, driver_pod()["metadata"]["name"]).stdout
    check("registered" in logs, f"the driver logs kubelet's registration: {logs[-800:]}")
    rss = driver_rss_kib()
    check_eq(len(rss), 1, "one driver process on the node")
    log(f"driver pod footprint (one container, VmRSS): {rss[0] / 1024:.1f} MiB")


def test_one_pod(work):
    ns = "node-one"
    create_namespace(ns)
    apply(curve_pod("p1", ns))
    uid = wait_running("p1", ns)
    check_cert_in_pod(work, "p1", ns)
    check_eq(len(mounts_of(uid)), 1, f"mounts of pod {uid} on the node")
    delete_pod("p1", ns, uid)


def test_bad_attribute(work):
    ns = "node-bad"
    create_namespace(ns)
    apply(curve_pod("bad", ns, attrs={"generation": "g1", "owner": "1000:1000"}))
    uid = wait_for("pod bad created", lambda: (get("pod", "bad", ns) or {}).get("metadata", {}).get("uid"))
    failed = wait_for("a FailedMount event with the driver's message", lambda: [
        e["message"] for e in events_of("bad", ns)
        if e["reason"] == "FailedMount" and "minicluster" in e["message"]], timeout=90)
    log(f"FailedMount: {failed[0][:300]}")
    check(pod_phase("bad", ns) == "Pending", "the pod does not start without its volume")
    check(not mounts_of(uid), "nothing mounted for the bad pod")
    # A pod's volumes cannot be edited: the fix is the pod re-created.
    delete_pod("bad", ns, uid)
    apply(curve_pod("bad", ns))
    uid = wait_running("bad", ns)
    check_cert_in_pod(work, "bad", ns)
    delete_pod("bad", ns, uid)


def test_driver_pod_deleted(work):
    ns = "node-driver-restart"
    create_namespace(ns)
    apply(curve_pod("a", ns))
    uid_a = wait_running("a", ns)
    old = driver_pod()["metadata"]
    kubectl("delete", "pod", "-n", NAMESPACE, old["name"], "--wait=false")
    apply(curve_pod("b", ns))  # while the driver is away or coming back
    wait_for("a new driver pod Ready", lambda: daemonset_ready() and driver_pod()
             and driver_pod()["metadata"]["uid"] != old["uid"], timeout=120)
    uid_b = wait_running("b", ns)
    check_cert_in_pod(work, "a", ns)  # kept its volume across the driver's restart
    check_cert_in_pod(work, "b", ns)
    delete_pod("a", ns, uid_a)
    delete_pod("b", ns, uid_b)
    check(not our_mounts(), f"nothing of the driver mounted: {our_mounts()}")


def test_kubelet_restart(work):
    ns = "node-kubelet-restart"
    create_namespace(ns)
    apply(curve_pod("k", ns, minicluster="m2"))
    uid = wait_running("k", ns)
    r = subprocess.run([os.path.join(REPO, "scripts", "controlplane"), "restart",
                        os.environ["FCC_CP_DIR"], "kubelet"], capture_output=True, text=True)
    check(r.returncode == 0, f"kubelet restart: {r.stderr[-800:]}")
    check_eq(len(mounts_of(uid)), 1, "the volume stays mounted across kubelet's restart")
    # The restarted kubelet serves exec once it has synced the pod again.
    wait_for("kubelet serving the pod again",
             lambda: kubectl("exec", "-n", ns, "k", "--", "true", check_rc=False).returncode == 0, timeout=60)
    check_cert_in_pod(work, "k", ns, minicluster="m2")
    # kubelet rebuilt its volume state from the pod dir: deleting unpublishes.
    delete_pod("k", ns, uid)
    check(not our_mounts(), f"nothing of the driver mounted: {our_mounts()}")


if __name__ == "__main__":
    main([test_registration, test_one_pod, test_bad_attribute, test_driver_pod_deleted,
          test_kubelet_restart], needs_controller=False, crd=False, node_images=node_images,
         setup=lambda work: install(work, without_admission_policy=True))
