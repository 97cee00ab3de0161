#!/usr/bin/env python3
"""The Helm chart installs the project on the real node, as docs/admin/install.md
says, and a MiniCluster of real Flux brokers runs under it.

  test_minicluster  `helm install` (one command; the driver pod waits for
                    the master key, created after it, and starts by itself),
                    then a size-2 ephemeral MiniCluster: both brokers get
                    the key's cert and index 0 prints both hostnames
  test_uninstall    `helm uninstall`: the driver, the controller and its
                    namespace go, the driver's namespace and master key stay
                    (deleted by hand after); the CRD stays (crds/); nothing is mounted

chart_render (test/deploy) holds the chart's objects equal to deploy/'s;
this shows Helm itself installs and removes them in a working order.

Env: FCC_DRIVER (the flux-curve-csi binary), FCC_KEEP=1.
"""

import functools
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from node_lib import (CONTROLLER_NS, NAMESPACE, controller_ready, daemonset_ready,  # noqa: E402
                      driver_image, driver_pod, expected_public, our_mounts)
from minicluster_node_test import (all_images, index0_logs, minicluster, pods_of,  # noqa: E402
                                   public_key_of, state, wait_gone)
from e2e_lib import (REPO, apply, check, check_eq, create_namespace, get, kubectl,  # noqa: E402
                     main, wait_for)

RELEASE = "flux-curve-csi"


@functools.cache
def helm_binary():
    return subprocess.run([os.path.join(REPO, "scripts", "build-helm")], capture_output=True,
                          text=True, check=True).stdout.strip()


def helm(*args):
    r = subprocess.run([helm_binary(), *args], capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"helm {' '.join(args[:2])}: {r.stderr.strip()}")
    return r.stdout


def install_with_helm(work):
    repository, tag = driver_image().rsplit(":", 1)
    notes = helm("install", RELEASE, os.path.join(REPO, "charts", "flux-curve-csi"),
                 "--set", f"image.repository={repository}", "--set", f"image.tag={tag}")
    check("create secret generic flux-curve-csi-master-key" in notes,
          f"the install's notes say how to create the master key: {notes}")
    pod = wait_for("the driver pod, waiting for its master key", driver_pod, timeout=120)
    check(not daemonset_ready(), f"the driver is not Ready without its key: {pod['status']}")
    key = os.path.join(work, "master.key")
    with open(key, "wb") as f:
        f.write(os.urandom(64))
    os.chmod(key, 0o400)
    kubectl("-n", NAMESPACE, "create", "secret", "generic", "flux-curve-csi-master-key",
            f"--from-file=master.key={key}")
    wait_for("the driver DaemonSet Ready once the key exists", daemonset_ready, timeout=180)
    wait_for("the controller's two replicas Ready", controller_ready, timeout=180)


def test_minicluster(work):
    ns, name = "mc-helm", "charted"
    create_namespace(ns)
    apply(minicluster(name, ns, 2, ["flux", "run", "-N2", "hostname"]))
    keys, uids = {}, set()

    def finished():
        # Read each broker's public key while its volume is mounted (kubelet
        # unmounts a finished pod's volumes).
        for p in pods_of(name, ns):
            uids.add(p["metadata"]["uid"])
            try:
                keys[p["metadata"]["name"]] = public_key_of(p["metadata"]["uid"])
            except (OSError, IndexError):
                pass
        return state(name, ns) in ("Succeeded", "Failed")
    wait_for("the MiniCluster finished", finished, timeout=240)
    check_eq(state(name, ns), "Succeeded", f"MiniCluster {name} state")
    out = index0_logs(name, ns)
    for i in range(2):
        check(f"{name}-{i}\n" in out, f"index 0 printed {name}-{i}: {out[-600:]}")
    generation = get("miniclusters.minicluster.dev", name, ns)["metadata"]["uid"]
    want = expected_public(work, ns, name, generation)
    check_eq(sorted(keys.values()), [want, want],
             f"both brokers' public key, as `flux-curve-csi cert` derives it ({sorted(keys)})")
    kubectl("delete", "miniclusters.minicluster.dev", name, "-n", ns)
    wait_gone(name, ns, uids)


def test_uninstall(work):
    helm("uninstall", RELEASE, "--wait", "--timeout", "3m")
    # The driver's Namespace is kept (helm.sh/resource-policy: keep), with the
    # master key Secret, the only copy of the keys; the docs delete it by hand.
    wait_for("the controller's namespace gone", lambda: get("namespace", CONTROLLER_NS) is None,
             timeout=180)
    check(get("namespace", NAMESPACE) is not None, "the driver's Namespace is kept")
    check(get("secret", "flux-curve-csi-master-key", NAMESPACE) is not None,
          "the master key Secret is kept")
    check(get("daemonset", "flux-curve-csi-node", NAMESPACE) is None, "the DaemonSet is gone")
    kubectl("delete", "namespace", NAMESPACE)
    wait_for("the driver's namespace gone by hand", lambda: get("namespace", NAMESPACE) is None,
             timeout=180)
    check(get("csidriver", "curve.minicluster.dev") is None, "the CSIDriver is gone")
    policies = kubectl("get", "validatingadmissionpolicies", "-o", "name").stdout.split()
    check_eq(policies, [], "no admission policy left")
    check(get("crd", "miniclusters.minicluster.dev") is not None,
          "the CRD stays (the chart's crds/: Helm never deletes it)")
    check_eq(our_mounts(), [], "nothing of the driver's mounted on the node")


if __name__ == "__main__":
    main([test_minicluster, test_uninstall], needs_controller=False, crd=False,
         node_images=all_images, setup=install_with_helm)
