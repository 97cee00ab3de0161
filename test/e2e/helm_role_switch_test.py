#!/usr/bin/env python3
"""A Helm role switch and uninstall never delete the master key (issue 42,
item 2), with the real helm (scripts/build-helm) against the real API
server (scripts/controlplane; no node, so the DaemonSet has no pods).

Installed with the defaults (namespaces.create=true), a release owns the
driver's Namespace, where the master key Secret lives. `helm upgrade
--reuse-values --set multikueue.role=manager` stops rendering the driver:
without a guard Helm deletes its Namespace (with the Secret), DaemonSet and
CSIDriver. Checked: that upgrade is refused while the driver's DaemonSet is
there, naming what to do; once the DaemonSet is deleted by hand, as the
message says, the switch goes through and the Namespace and Secret stay
(helm.sh/resource-policy: keep); `helm uninstall` leaves them too.

  test/e2e/helm_role_switch_test.py   (FCC_HELM: helm; default scripts/build-helm)
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_lib import REPO, check, get, kubectl, log, main, wait_for  # noqa: E402

CHART = os.path.join(REPO, "charts", "flux-curve-csi")
DRIVER_NS = "flux-curve-csi"
SECRET = "flux-curve-csi-master-key"
RELEASE = "fcc"


def helm_binary():
    helm = os.environ.get("FCC_HELM")
    if not helm:
        helm = subprocess.run([os.path.join(REPO, "scripts", "build-helm")],
                              capture_output=True, text=True, check=True).stdout.strip()
    return helm


def helm(*args, check_rc=True):
    r = subprocess.run([HELM, *args], capture_output=True, text=True, timeout=300)
    if check_rc:
        check(r.returncode == 0, f"helm {' '.join(args)}: {r.stderr.strip()}")
    return r


def exists(kind, name, ns=None):
    args = ["get", kind, name] + (["-n", ns] if ns else [])
    return kubectl(*args, check_rc=False).returncode == 0


def test_role_switch_keeps_the_master_key(work):
    helm("install", RELEASE, CHART, "-n", "default")
    kubectl("-n", DRIVER_NS, "create", "secret", "generic", SECRET,
            "--from-literal=master.key=" + "k" * 64)
    check(exists("daemonset", "flux-curve-csi-node", DRIVER_NS), "the driver DaemonSet")

    # 1. The switch to manager while the driver is there: refused, with
    # what to do; nothing deleted.
    r = helm("upgrade", RELEASE, CHART, "-n", "default", "--reuse-values",
             "--set", "multikueue.role=manager", check_rc=False)
    check(r.returncode != 0, "the switch to manager was not refused")
    err = r.stderr.strip()
    for says in ("multikueue.role=manager", "delete daemonset flux-curve-csi-node",
                 "MiniCluster"):
        check(says in err, f"the refusal does not say {says!r}: {err}")
    log(f"refused: {err[-300:]}")
    check(exists("namespace", DRIVER_NS) and exists("secret", SECRET, DRIVER_NS),
          "a refused upgrade deleted the Namespace or the Secret")
    check(exists("csidriver", "curve.minicluster.dev"), "a refused upgrade deleted the CSIDriver")

    # 2. As the message says: the DaemonSet goes by hand (no MiniCluster
    # pod runs here), then the switch; the Namespace and the key stay.
    kubectl("-n", DRIVER_NS, "delete", "daemonset", "flux-curve-csi-node")
    helm("upgrade", RELEASE, CHART, "-n", "default", "--reuse-values",
         "--set", "multikueue.role=manager")
    wait_for("the CSIDriver gone with the role switch",
             lambda: not exists("csidriver", "curve.minicluster.dev"), timeout=30)
    ns = get("namespace", DRIVER_NS)
    check(ns["status"].get("phase") != "Terminating", f"the driver Namespace is {ns['status']}")
    check(exists("secret", SECRET, DRIVER_NS), "the master key Secret went with the role switch")
    log("manager: the CSIDriver is gone, the driver Namespace and the master key Secret stay")

    # 3. Uninstall leaves them too.
    helm("uninstall", RELEASE, "-n", "default", "--wait")
    check(exists("namespace", DRIVER_NS) and exists("secret", SECRET, DRIVER_NS),
          "helm uninstall deleted the master key")
    log("uninstalled: the driver Namespace and the master key Secret stay")


if __name__ == "__main__":
    HELM = helm_binary()
    main([test_role_switch_keeps_the_master_key], needs_controller=False, crd=False)
