#!/usr/bin/env python3
"""Renders deploy/ with kustomize and checks that the CSIDriver, the
DaemonSet and the driver's own flags agree: one driver name, one socket (the
one the driver serves, registers with kubelet and probes for liveness), one
master key Secret. Then starts the real driver with
the DaemonSet's args (paths redirected to a temp dir) to prove it accepts
them, and checks that deliberately broken manifests are caught. The
MultiKueue variants (deploy/multikueue/) are deploy/'s render with only
their own changes.

usage: check_render.py INSTALL_KUSTOMIZE DEPLOY_DIR DRIVER_BINARY
(INSTALL_KUSTOMIZE: scripts/build-kustomize, which prints its path)
"""

import copy
import glob
import json
import os
import re
import shutil
import posixpath
import signal
import subprocess
import sys
import tempfile
import time

import manifests as m

DS_NAME = "flux-curve-csi-node"
REGISTRATION_DIR = "/var/lib/kubelet/plugins_registry"
PLUGIN_DIR = f"/var/lib/kubelet/plugins/{m.DRIVER_NAME}"
PODS_DIR = "/var/lib/kubelet/pods"


def check_csidriver(objects, c):
    drivers = m.find(objects, "CSIDriver")
    if not c.equal([d["metadata"]["name"] for d in drivers], [m.DRIVER_NAME],
                   "CSIDriver names"):
        return
    spec = drivers[0]["spec"]
    c.equal(spec.get("attachRequired"), False, "CSIDriver attachRequired")
    c.equal(spec.get("podInfoOnMount"), True, "CSIDriver podInfoOnMount")
    c.equal(spec.get("volumeLifecycleModes"), ["Ephemeral"],
            "CSIDriver volumeLifecycleModes")
    c.equal(spec.get("fsGroupPolicy"), "None", "CSIDriver fsGroupPolicy")
    c.equal(spec.get("requiresRepublish", False), False,
            "CSIDriver requiresRepublish")


def check_images(spec, c):
    for ct in spec["containers"]:
        image = ct.get("image", "")
        tag = image.rsplit("/", 1)[-1].partition(":")[2]
        c.check(tag and tag != "latest" or "@sha256:" in image,
                f"container {ct['name']}: image {image!r} is not pinned")


PROJECT_IMAGE = "ghcr.io/flux-curve-csi/flux-curve-csi"
BINARIES = ("flux-curve-csi", "minicluster-controller")


def check_other_workloads(objects, c):
    """Other workloads (the controller) use the same pinned image, name a
    program it holds and, unlike the driver, run as non-root."""
    for w in m.find(objects, "Deployment"):
        spec = m.pod_spec(w)
        check_images(spec, c)
        for ct in spec["containers"]:
            if not ct.get("image", "").startswith(PROJECT_IMAGE + ":"):
                continue
            name = f"Deployment {w['metadata']['name']} container {ct['name']}"
            c.check((ct.get("command") or [""])[0] in BINARIES,
                    f"{name}: command is not one of {BINARIES}")
            user = {**spec.get("securityContext", {}),
                    **ct.get("securityContext", {})}
            c.check(user.get("runAsNonRoot") is True
                    or user.get("runAsUser", 0) != 0,
                    f"{name}: must run as non-root")


def check_driver(spec, driver, serve_flags, global_flags, c):
    f = m.flags(driver.get("args", []))
    c.equal(driver.get("command"), ["flux-curve-csi"],
            "driver command (the image holds both programs)")
    c.equal(f[None], ["serve"], "driver positional args")
    for k in f:
        if k is not None:
            c.check(k in serve_flags | global_flags,
                    f"driver arg {k} is not a flag flux-curve-csi accepts "
                    f"(serve --help lists {sorted(serve_flags)})")
    c.check(driver.get("securityContext", {}).get("privileged") is True,
            "driver must be privileged (it mounts)")
    c.equal(driver.get("securityContext", {}).get("runAsUser"), 0,
            "driver runAsUser (the image's default user is not root)")
    c.check(driver.get("securityContext", {}).get("readOnlyRootFilesystem")
            is True, "driver root filesystem should be read-only")

    # --node-id comes from the node name.
    if c.check(f.get("--node-id") == "$(NODE_NAME)",
               "driver --node-id must be $(NODE_NAME)"):
        env = {e["name"]: e for e in driver.get("env", [])}
        c.equal(env.get("NODE_NAME", {}).get("valueFrom", {})
                .get("fieldRef", {}).get("fieldPath"),
                "spec.nodeName", "driver env NODE_NAME")

    # Pods' volume dirs, shared both ways with the host, at the path the
    # driver confines itself to.
    if "--kubelet-dir" in serve_flags:
        c.equal(f.get("--kubelet-dir", "/var/lib/kubelet") + "/pods", PODS_DIR,
                "driver --kubelet-dir + /pods (the pods dir it may touch)")
    try:
        mount, rel = m.mount_for(driver, PODS_DIR)
        c.equal(rel, "", "pods dir mount")
        c.equal(mount.get("mountPropagation"), "Bidirectional",
                "pods dir mountPropagation")
        c.equal(m.host_path_of(spec, driver, PODS_DIR), PODS_DIR,
                "pods dir hostPath")
    except KeyError as e:
        c.check(False, f"pods dir: {e}")

    # The master keys: the whole Secret mounted read-only, owner-only, at
    # the flag's dir (no items: a key added for a rotation must reach it).
    key_dir = f.get("--master-key-dir", "")
    try:
        c.check(key_dir != "", "the driver has no --master-key-dir")
        mount, rel = m.mount_for(driver, key_dir + "/" + m.MASTER_KEY_ITEM)
        c.check(mount.get("readOnly") is True, "master key mount not readOnly")
        secret = m.volume(spec, mount["name"]).get("secret")
        if c.check(secret is not None, "master key volume is not a Secret"):
            c.equal(secret.get("secretName"), m.MASTER_KEY_SECRET,
                    "master key secretName")
            c.equal(key_dir.rstrip("/"), mount["mountPath"].rstrip("/"),
                    "--master-key-dir vs the Secret's mountPath")
            c.check(not secret.get("items"),
                    "the master key Secret volume lists items: keys added "
                    "for a rotation would never reach the driver")
            mode = secret.get("defaultMode", 0o644)
            c.check(mode & 0o077 == 0,
                    f"master key mode {mode:o} is readable by group/other "
                    "(the driver refuses it)")
    except KeyError as e:
        c.check(False, f"master key: {e}")
    return f


def check_socket(spec, driver, driver_flags, c):
    """The socket the driver serves is the one the sidecars and kubelet use."""
    endpoint = str(driver_flags.get("--endpoint", ""))
    if not c.check(endpoint.startswith("unix:///"),
                   f"driver --endpoint {endpoint!r} is not unix:///..."):
        return
    sock = endpoint[len("unix://"):]
    try:
        host_sock = m.host_path_of(spec, driver, sock)
    except KeyError as e:
        c.check(False, f"driver socket: {e}")
        return
    c.equal(host_sock, f"{PLUGIN_DIR}/csi.sock", "driver socket on the host")
    plugin_vol = m.volume(spec, m.mount_for(driver, sock)[0]["name"])
    c.equal(plugin_vol["hostPath"].get("type"), "DirectoryOrCreate",
            "plugin dir hostPath type")

    c.equal([ct["name"] for ct in spec["containers"]], ["driver"],
            "one container: the driver registers itself (no sidecars)")
    c.equal(driver_flags.get("--kubelet-registration-path"), host_sock,
            "driver --kubelet-registration-path (the socket kubelet dials)")
    reg = str(driver_flags.get("--registration-dir", ""))
    try:
        c.equal(m.host_path_of(spec, driver, reg + "/x"), REGISTRATION_DIR + "/x",
                "driver --registration-dir on the host (kubelet's plugin registry)")
    except KeyError as e:
        c.check(False, f"driver --registration-dir {reg!r}: {e}")
    probe = driver.get("livenessProbe", {}).get("httpGet", {})
    c.equal((probe.get("path"), probe.get("port")), ("/healthz", "metrics"),
            "driver livenessProbe: its own /healthz on the metrics port")


def check_metrics(driver, driver_flags, serve_flags, c):
    """If the driver serves metrics, the DaemonSet names that port."""
    if "--metrics-address" not in serve_flags:
        return
    address = driver_flags.get("--metrics-address", "0.0.0.0:9810")
    if address == "":
        return
    port = int(str(address).rsplit(":", 1)[1])
    ports = {p.get("name"): p["containerPort"] for p in driver.get("ports", [])}
    c.equal(ports.get("metrics"), port,
            "driver containerPort 'metrics' vs --metrics-address")


def check_network_policies(objects, c):
    """Each NetworkPolicy selects one workload's pods, and the ports it opens
    are ports those pods name (a renamed port would shut scrapes out)."""
    policies = m.find(objects, "NetworkPolicy")
    c.check(len(policies) == 2, f"expected 2 NetworkPolicies, found {len(policies)}")
    workloads = m.find(objects, "DaemonSet") + m.find(objects, "Deployment")
    for policy in policies:
        name = policy["metadata"]["name"]
        want = policy["spec"]["podSelector"].get("matchLabels", {})
        selected = [w for w in workloads
                    if w["metadata"].get("namespace") == policy["metadata"].get("namespace")
                    and want.items() <= w["spec"]["template"]["metadata"]
                    .get("labels", {}).items()]
        if not c.check(len(selected) == 1,
                       f"NetworkPolicy {name} selects {len(selected)} workloads, not 1"):
            continue
        named = {p.get("name") for ct in m.pod_spec(selected[0])["containers"]
                 for p in ct.get("ports", [])}
        for rule in policy["spec"].get("ingress", []):
            for port in rule.get("ports", []):
                c.check(port.get("port") in named,
                        f"NetworkPolicy {name} opens port {port.get('port')!r}, "
                        f"which its pods do not name ({sorted(named)})")


PSA = "pod-security.kubernetes.io/"
CRITICAL_CLASSES = ("system-node-critical", "system-cluster-critical")
QUANTITY = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
            "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity(value):
    text = str(value)
    number = text.rstrip("kMGTi")
    return float(number) * QUANTITY[text[len(number):]]


def check_namespace_admission(objects, c):
    """The namespace admits the privileged driver where Pod Security
    Admission enforces a stricter default, and a ResourceQuota scoped to
    each critical PriorityClass a workload there uses lets GKE admit its
    pods (docs/admin/install.md, Install)."""
    ns = [n for n in m.find(objects, "Namespace")
          if n["metadata"]["name"] == m.NAMESPACE]
    labels = ns[0]["metadata"].get("labels", {}) if ns else {}
    # warn and audit too: a cluster default of baseline/restricted for them
    # would flag the driver on every apply.
    for mode in ("enforce", "warn", "audit"):
        c.equal(labels.get(PSA + mode), "privileged",
                f"Namespace {m.NAMESPACE} label {PSA}{mode} "
                "(the driver is privileged)")
    quotas = [q for q in m.find(objects, "ResourceQuota")
              if q["metadata"].get("namespace") == m.NAMESPACE]
    for w in m.find(objects, "DaemonSet") + m.find(objects, "Deployment"):
        cls = m.pod_spec(w).get("priorityClassName")
        if w["metadata"].get("namespace") != m.NAMESPACE \
                or cls not in CRITICAL_CLASSES:
            continue
        covering = [q for q in quotas
                    if any(e.get("scopeName") == "PriorityClass"
                           and e.get("operator") == "In"
                           and cls in e.get("values", [])
                           for e in q["spec"].get("scopeSelector", {})
                           .get("matchExpressions", []))
                    and not q["spec"].get("scopes")]
        name = f"{w['kind']} {w['metadata']['name']} (priorityClassName {cls})"
        if not c.check(len(covering) == 1,
                       f"{name}: {len(covering)} ResourceQuotas in "
                       f"{m.NAMESPACE} have a PriorityClass In scope with "
                       f"{cls}; GKE needs one"):
            continue
        # One pod per node: a count below any cluster's node count would
        # leave nodes without the driver.
        pods = covering[0]["spec"].get("hard", {}).get("pods")
        c.check(pods is not None and quantity(pods) >= 100000,
                f"{name}: ResourceQuota {covering[0]['metadata']['name']} "
                f"hard pods {pods!r} is below 100000 (GKE's own quota "
                "allows 1G)")


CONTROLLER = "minicluster-controller"
RESTRICTED_LEVEL = "restricted"
SA_USER = re.compile(r"system:serviceaccount:([a-z0-9.-]+):([a-z0-9.-]+)")


def check_controller_namespace(objects, c):
    """The controller lives in a namespace of its own, away from the master
    key Secret, that enforces Pod Security `restricted`, and its pods meet
    that level; its ServiceAccount, Lease RBAC and NetworkPolicy are there
    too, and the ClusterRoleBinding names that ServiceAccount."""
    deployments = m.find(objects, "Deployment", CONTROLLER)
    if not c.equal(len(deployments), 1, f"Deployments named {CONTROLLER}"):
        return None
    ns = deployments[0]["metadata"].get("namespace")
    c.check(ns and ns != m.NAMESPACE,
            f"Deployment {CONTROLLER} is in {ns!r}: it must not share "
            f"{m.NAMESPACE} (the master key Secret) with the driver")
    namespaces = [n for n in m.find(objects, "Namespace")
                  if n["metadata"]["name"] == ns]
    labels = namespaces[0]["metadata"].get("labels", {}) if namespaces else {}
    c.check(namespaces, f"Namespace {ns} is not in the render")
    for mode in ("enforce", "warn", "audit"):
        c.equal(labels.get(PSA + mode), RESTRICTED_LEVEL,
                f"Namespace {ns} label {PSA}{mode}")
    spec = m.pod_spec(deployments[0])
    sa = spec.get("serviceAccountName")
    for ct in spec["containers"]:
        sc = {**spec.get("securityContext", {}), **ct.get("securityContext", {})}
        name = f"Deployment {CONTROLLER} container {ct['name']}"
        c.check(sc.get("runAsNonRoot") is True, f"{name}: runAsNonRoot (restricted)")
        c.equal(sc.get("seccompProfile", {}).get("type"), "RuntimeDefault",
                f"{name}: seccompProfile (restricted)")
        c.check(sc.get("allowPrivilegeEscalation") is False,
                f"{name}: allowPrivilegeEscalation false (restricted)")
        c.equal(sc.get("capabilities", {}).get("drop"), ["ALL"],
                f"{name}: capabilities.drop (restricted)")
    for kind, name in (("ServiceAccount", sa), ("Role", None), ("RoleBinding", None),
                       ("NetworkPolicy", CONTROLLER)):
        found = [o for o in m.find(objects, kind, name)
                 if o["metadata"]["name"].startswith(CONTROLLER)]
        c.check(found and all(o["metadata"].get("namespace") == ns for o in found),
                f"{kind} {name or CONTROLLER + '*'}: not in {ns} "
                f"({[o['metadata'].get('namespace') for o in found]})")
    for binding in m.find(objects, "ClusterRoleBinding", CONTROLLER):
        c.equal([(s.get("kind"), s.get("namespace"), s.get("name"))
                 for s in binding.get("subjects", [])],
                [("ServiceAccount", ns, sa)], f"ClusterRoleBinding {CONTROLLER} subjects")
    return f"system:serviceaccount:{ns}:{sa}"


POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
# The policies the default install must have (docs/internals/security.md).
POLICIES = ("curve-volume-pods.minicluster.dev", "curve-volume-jobs.minicluster.dev",
            "curve-volume-count.minicluster.dev",
            "minicluster-controller-scope.minicluster.dev",
            "minicluster-controller-owner.minicluster.dev",
            "minicluster-controller-jobs.minicluster.dev",
            "minicluster-controller-job-spec.minicluster.dev",
            "minicluster-controller-services.minicluster.dev",
            "minicluster-controller-networkpolicies.minicluster.dev",
            "minicluster-controller-delete.minicluster.dev",
            "minicluster-controller-delete-job.minicluster.dev")


def check_policies(objects, controller_user, c):
    """The admission policies are part of the install, each bound once with
    Deny, and every ServiceAccount they name is the controller's as
    deployed (a stale namespace there would refuse its Jobs, or confine
    nobody)."""
    policies = {p["metadata"]["name"]: p for p in m.find(objects, POLICY_KINDS[0])}
    for name in POLICIES:
        c.check(name in policies, f"ValidatingAdmissionPolicy {name} is not in the render")
    for name, policy in policies.items():
        bindings = [b for b in m.find(objects, POLICY_KINDS[1])
                    if b["spec"].get("policyName") == name]
        if c.equal(len(bindings), 1, f"bindings of ValidatingAdmissionPolicy {name}"):
            c.equal(bindings[0]["spec"].get("validationActions"), ["Deny"],
                    f"binding of {name} validationActions")
        c.equal(policy["spec"].get("failurePolicy"), "Fail", f"{name} failurePolicy")
        for user in SA_USER.findall(json.dumps(policy)):
            if user[1] == CONTROLLER:
                c.equal("system:serviceaccount:%s:%s" % user, controller_user,
                        f"{name}: the controller's identity")


def check_controller_deletes(objects, controller_user, c):
    """Each resource the controller's ClusterRole may delete is held by a
    policy that matches DELETE of it by the controller's user (issue 51,
    item 3: RBAC alone lets its token delete every MiniCluster)."""
    policies = m.find(objects, POLICY_KINDS[0])
    for role in m.find(objects, "ClusterRole", CONTROLLER):
        for rule in role.get("rules", []):
            if not {"delete", "deletecollection", "*"} & set(rule.get("verbs", [])):
                continue
            c.check("deletecollection" not in rule["verbs"] and "*" not in rule["verbs"],
                    f"ClusterRole {CONTROLLER}: deletecollection or * on {rule['resources']} "
                    "(a policy sees no object to check)")
            for resource in rule.get("resources", []):
                confined = [p["metadata"]["name"] for p in policies
                            if controller_user in json.dumps(p["spec"].get("matchConditions", []))
                            and any("DELETE" in r.get("operations", [])
                                    and resource in r.get("resources", [])
                                    for r in p["spec"].get("matchConstraints", {})
                                    .get("resourceRules", []))]
                c.check(confined, f"ClusterRole {CONTROLLER} may delete {resource}, and no "
                        "admission policy matches that DELETE by the controller")


def check_objects(objects, serve_flags, global_flags):
    c = m.Checker()
    check_csidriver(objects, c)
    c.equal([n["metadata"]["name"] for n in m.find(objects, "Namespace")
             if n["metadata"]["name"] == m.NAMESPACE], [m.NAMESPACE],
            "Namespace")
    ds = m.find(objects, "DaemonSet", DS_NAME)
    if not c.equal(len(ds), 1, f"DaemonSets named {DS_NAME}"):
        return c.errors
    ds = ds[0]
    c.equal(ds["metadata"].get("namespace"), m.NAMESPACE, "DaemonSet namespace")
    spec = m.pod_spec(ds)
    sa_name = spec.get("serviceAccountName")
    sas = [s for s in m.find(objects, "ServiceAccount", sa_name)
           if s["metadata"].get("namespace") == m.NAMESPACE]
    if c.equal(len(sas), 1, f"ServiceAccount {sa_name} in {m.NAMESPACE}"):
        c.equal(sas[0].get("automountServiceAccountToken"), False,
                "ServiceAccount automountServiceAccountToken")
    c.check(spec.get("automountServiceAccountToken") is False,
            "DaemonSet pods must not mount an API token")
    c.check({"operator": "Exists"} in spec.get("tolerations", []),
            "DaemonSet must tolerate every taint (operator: Exists)")
    c.equal(spec.get("priorityClassName"), "system-node-critical",
            "priorityClassName")
    c.equal(ds["spec"].get("updateStrategy", {}).get("type"), "RollingUpdate",
            "updateStrategy")
    check_images(spec, c)
    check_other_workloads(objects, c)
    check_network_policies(objects, c)
    check_namespace_admission(objects, c)
    controller_user = check_controller_namespace(objects, c)
    if controller_user:
        check_policies(objects, controller_user, c)
        check_controller_deletes(objects, controller_user, c)
    for ct in spec["containers"]:
        res = ct.get("resources", {})
        c.check("requests" in res and "limits" in res,
                f"container {ct['name']} has no requests/limits")
    try:
        driver = m.container(spec, "driver")
    except KeyError as e:
        c.check(False, str(e))
        return c.errors
    f = check_driver(spec, driver, serve_flags, global_flags, c)
    check_socket(spec, driver, f, c)
    check_metrics(driver, f, serve_flags, c)
    return c.errors


def driver_accepts_args(binary, args):
    """Starts the real driver with the DaemonSet's args, only the socket, the
    registration dir and the key redirected to a temp dir; it must come up
    serving."""
    with tempfile.TemporaryDirectory() as tmp:
        key = os.path.join(tmp, "master.key")  # the ring's default key
        with open(key, "wb") as fh:
            fh.write(os.urandom(64))
        os.chmod(key, 0o400)
        sock = os.path.join(tmp, "csi.sock")
        argv = []
        for a in args:
            a = str(a)
            if a.startswith("--endpoint="):
                a = f"--endpoint=unix://{sock}"
            elif a.startswith("--master-key-dir="):
                a = f"--master-key-dir={tmp}"
            elif a.startswith("--metrics-address="):
                a = "--metrics-address=127.0.0.1:0"
            elif a.startswith("--registration-dir="):
                a = f"--registration-dir={tmp}"
            argv.append(a.replace("$(NODE_NAME)", "render-check-node"))
        proc = subprocess.Popen([binary, *argv], stderr=subprocess.PIPE,
                                text=True)
        deadline = time.monotonic() + 10
        while not os.path.exists(sock) and proc.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        up = os.path.exists(sock)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        if not up or proc.returncode != 0:
            return [f"driver with the DaemonSet's args {argv} did not serve "
                    f"and stop cleanly (exit {proc.returncode}): {err[-2000:]}"]
    return []


# Each mutation breaks one thing the checks must catch.
def _driver(objs):
    return m.container(m.pod_spec(m.find(objs, "DaemonSet", DS_NAME)[0]),
                       "driver")


def _set_arg(ct, flag, value):
    ct["args"] = [a for a in ct["args"] if not str(a).startswith(flag + "=")]
    ct["args"].append(f"{flag}={value}")


def _namespace(objs):
    return [n for n in m.find(objs, "Namespace")
            if n["metadata"]["name"] == m.NAMESPACE][0]


def _quota_scope(objs):
    quota = m.find(objs, "ResourceQuota")[0]
    return quota["spec"]["scopeSelector"]["matchExpressions"][0]


def _controller(objs):
    return m.find(objs, "Deployment", CONTROLLER)[0]


def _controller_ns(objs):
    ns = _controller(objs)["metadata"]["namespace"]
    return [n for n in m.find(objs, "Namespace") if n["metadata"]["name"] == ns][0]


def _policy(objs, name):
    return m.find(objs, POLICY_KINDS[0], name)[0]


def _move_controller(objs, ns):
    for o in objs:
        if o["metadata"]["name"].startswith(CONTROLLER) and "namespace" in o["metadata"]:
            o["metadata"]["namespace"] = ns
    for b in m.find(objs, "ClusterRoleBinding", CONTROLLER):
        b["subjects"][0]["namespace"] = ns


def _stale_user(objs):
    policy = _policy(objs, "minicluster-controller-jobs.minicluster.dev")
    cond = policy["spec"]["matchConditions"][0]
    cond["expression"] = cond["expression"].replace(":minicluster-system:", f":{m.NAMESPACE}:")


MUTATIONS = {
    "driver name": lambda o: m.find(o, "CSIDriver")[0]["metadata"].update(
        name="curve.example.com"),
    "podInfoOnMount": lambda o: m.find(o, "CSIDriver")[0]["spec"].update(
        podInfoOnMount=False),
    "driver socket": lambda o: _set_arg(_driver(o), "--endpoint",
                                        "unix:///csi/other.sock"),
    "registration path": lambda o: _set_arg(
        _driver(o), "--kubelet-registration-path",
        "/var/lib/kubelet/plugins/csi-curve/csi.sock"),
    "key dir": lambda o: _set_arg(_driver(o), "--master-key-dir",
                                  "/etc/master-keys"),
    "key items": lambda o: m.volume(
        m.pod_spec(m.find(o, "DaemonSet", DS_NAME)[0]),
        "master-key")["secret"].update(
            items=[{"key": "master.key", "path": "master.key"}]),
    "unknown flag": lambda o: _driver(o)["args"].append("--verbose=5"),
    "non-root driver": lambda o: _driver(o)["securityContext"].pop(
        "runAsUser"),
    "propagation": lambda o: m.mount_for(_driver(o), PODS_DIR)[0].update(
        mountPropagation="HostToContainer"),
    "registration dir": lambda o: _set_arg(_driver(o), "--registration-dir",
                                           "/var/lib/kubelet/plugins_registry"),
    "liveness probe": lambda o: _driver(o)["livenessProbe"]["httpGet"].update(
        port=9808),
    "metrics port": lambda o: [p.update(containerPort=9811)
                               for p in _driver(o)["ports"]
                               if p["name"] == "metrics"],
    "kubelet dir": lambda o: _set_arg(_driver(o), "--kubelet-dir",
                                      "/srv/kubelet"),
    "policy port": lambda o: m.find(o, "NetworkPolicy")[0]["spec"]["ingress"][0]
    ["ports"][0].update(port="metric"),
    "psa enforce": lambda o: _namespace(o)["metadata"]["labels"].pop(
        "pod-security.kubernetes.io/enforce"),
    "psa baseline": lambda o: _namespace(o)["metadata"]["labels"].update(
        {"pod-security.kubernetes.io/enforce": "baseline"}),
    "psa warn": lambda o: _namespace(o)["metadata"]["labels"].pop(
        "pod-security.kubernetes.io/warn"),
    "quota class": lambda o: _quota_scope(o).update(
        values=["system-cluster-critical"]),
    "quota operator": lambda o: _quota_scope(o).update(operator="NotIn"),
    "quota namespace": lambda o: m.find(o, "ResourceQuota")[0]["metadata"]
    .update(namespace="default"),
    "quota count": lambda o: m.find(o, "ResourceQuota")[0]["spec"]["hard"]
    .update(pods="100"),
    "controller with the key": lambda o: _move_controller(o, m.NAMESPACE),
    "controller psa": lambda o: _controller_ns(o)["metadata"]["labels"].update(
        {"pod-security.kubernetes.io/enforce": "baseline"}),
    "controller escalation": lambda o: m.pod_spec(_controller(o))["containers"][0]
    ["securityContext"].update(allowPrivilegeEscalation=True),
    "controller binding": lambda o: m.find(o, "ClusterRoleBinding", CONTROLLER)[0]
    ["subjects"][0].update(namespace=m.NAMESPACE),
    "policy user": _stale_user,
    "policy unbound": lambda o: o.remove(m.find(o, POLICY_KINDS[1],
                                                "minicluster-controller-owner.minicluster.dev")[0]),
    "policy missing": lambda o: o.remove(_policy(o, "minicluster-controller-scope.minicluster.dev")),
    "delete unconfined": lambda o: [
        _policy(o, name)["spec"]["matchConstraints"]["resourceRules"][0].update(
            operations=["UPDATE"])
        for name in ("minicluster-controller-delete.minicluster.dev",
                     "minicluster-controller-delete-job.minicluster.dev")],
    "key mode": lambda o: m.volume(
        m.pod_spec(m.find(o, "DaemonSet", DS_NAME)[0]),
        "master-key")["secret"].update(defaultMode=0o440),
}


OPT_OUT = "components/without-admission-policy"


def check_opt_out(kustomize, deploy_dir, objects):
    """deploy/ with the opt-out component added as docs/admin/install.md says
    (`kustomize edit add component`): no policy or binding, everything
    else as in deploy/'s render."""
    with tempfile.TemporaryDirectory() as tmp:
        copy_dir = os.path.join(tmp, "deploy")
        shutil.copytree(deploy_dir, copy_dir)
        subprocess.run([kustomize, "edit", "add", "component", OPT_OUT], cwd=copy_dir,
                       check=True, capture_output=True)
        without = m.render(kustomize, copy_dir)
    errors = []
    left = [f"{o['kind']}/{o['metadata']['name']}" for o in without if o["kind"] in POLICY_KINDS]
    if left:
        errors.append(f"{OPT_OUT}: policies left in the render: {left}")
    rest = [o for o in objects if o["kind"] not in POLICY_KINDS]
    if without != rest:
        errors.append(f"{OPT_OUT}: the render differs from deploy/'s beyond the policies")
    if not [o for o in objects if o["kind"] in POLICY_KINDS]:
        errors.append("deploy/ renders no admission policy")
    print(f"{OPT_OUT}: {len(without)} objects, no policy; deploy/ has "
          f"{len(objects) - len(rest)} policy objects more")
    return errors


FLUX_OPERATOR = "system:serviceaccount:operator-system:operator-controller-manager"
MULTIKUEUE_SA = "system:serviceaccount:kueue-system:multikueue-sa"
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
WORKER_ARG = "--multikueue-worker"
# deploy/multikueue/worker/policy.yaml's, and the policies the worker
# overlay gives one matchCondition more (with what it names).
WORKER_POLICIES = ("minicluster-controller-multikueue.minicluster.dev",
                   "multikueue-curve-volume-jobs.minicluster.dev")
WORKER_CONDITIONS = {"minicluster-controller-scope.minicluster.dev": ORIGIN_LABEL,
                     "curve-volume-jobs.minicluster.dev": MULTIKUEUE_SA}
OVERLAYS = ("multikueue/manager", "multikueue/worker")


def _key(o):
    return (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])


def check_multikueue_objects(deploy, manager, worker):
    """The MultiKueue variants against deploy/'s render (docs/admin/multikueue.md):
    the manager is deploy/ without the driver (CSIDriver, its namespace and
    all in it), every other object unchanged, the admission policies all
    there; the worker is deploy/ with the controller given --multikueue-worker,
    two policies given one matchCondition more, and policy.yaml's policies.
    Neither admits the flux-operator's Jobs (deploy/ does, with
    components/flux-operator)."""
    c = m.Checker()
    base = {_key(o): copy.deepcopy(o) for o in deploy}
    jobs = base.get((POLICY_KINDS[0], "", "curve-volume-jobs.minicluster.dev"))
    operator = {"name": "fluxOperator", "expression": f"'{FLUX_OPERATOR}'"}
    if c.equal((jobs or {}).get("spec", {}).get("variables", [None])[0], operator,
               "deploy/: the flux-operator's user in curve-volume-jobs"):
        jobs["spec"]["variables"][0]["expression"] = "''"
    driver = {k for k in base if k[0] == "CSIDriver" or k[1] == m.NAMESPACE
              or k[:2] == ("Namespace", "") and k[2] == m.NAMESPACE}
    got = {_key(o): o for o in manager}
    c.equal(sorted(got), sorted(set(base) - driver), "manager: objects (deploy/'s but the driver's)")
    for k in sorted(set(got) & set(base)):
        c.check(got[k] == base[k], f"manager: {'/'.join(k)} differs from deploy/'s")
    for kind in ("DaemonSet", "CSIDriver"):
        c.check(not m.find(manager, kind), f"manager: has a {kind}")

    got = {_key(o): copy.deepcopy(o) for o in worker}
    c.equal(sorted(set(base) - set(got)), [], "worker: deploy/'s objects missing")
    c.equal(sorted(set(got) - set(base)),
            sorted((kind, "", name) for kind in POLICY_KINDS for name in WORKER_POLICIES),
            "worker: objects beyond deploy/'s")
    # Undo what the overlay changes, checking it on the way; the rest must
    # be deploy/'s.
    for d in m.find(list(got.values()), "Deployment", CONTROLLER):
        try:
            ct = m.container(m.pod_spec(d), "controller")
            want = m.container(m.pod_spec(base[_key(d)]), "controller")["args"]
        except KeyError as e:
            c.check(False, f"worker: controller container: {e}")
            continue
        if c.equal(ct.get("args"), want + [WORKER_ARG], "worker: the controller's args"):
            ct["args"] = want
    for name, names in WORKER_CONDITIONS.items():
        policy = got.get((POLICY_KINDS[0], "", name))
        if policy is None or _key(policy) not in base:
            continue
        conditions = policy["spec"].get("matchConditions", [])
        want = base[_key(policy)]["spec"]["matchConditions"]
        if c.check(conditions[:-1] == want and len(conditions) == len(want) + 1
                   and names in conditions[-1].get("expression", ""),
                   f"worker: {name} matchConditions are not deploy/'s and one naming {names}"):
            policy["spec"]["matchConditions"] = want
    for k in sorted(set(got) & set(base)):
        c.check(got[k] == base[k], f"worker: {'/'.join(k)} differs from deploy/'s "
                "beyond the overlay's changes")
    jobs = got.get((POLICY_KINDS[0], "", WORKER_POLICIES[1]))
    c.check(jobs and MULTIKUEUE_SA in json.dumps(jobs.get("spec", {}).get("matchConditions")),
            f"worker: {WORKER_POLICIES[1]} does not match {MULTIKUEUE_SA}'s requests")
    return c.errors


def _drop(objs, kind, name):
    objs.remove(m.find(objs, kind, name)[0])


MULTIKUEUE_MUTATIONS = {  # (manager, worker) -> breaks one
    "manager with the DaemonSet": lambda d, mg, w: mg.append(m.find(d, "DaemonSet", DS_NAME)[0]),
    "manager without jobs.yaml": lambda d, mg, w: _drop(mg, POLICY_KINDS[0],
                                                        "curve-volume-jobs.minicluster.dev"),
    "worker without the flag": lambda d, mg, w: m.container(
        m.pod_spec(m.find(w, "Deployment", CONTROLLER)[0]), "controller")["args"].pop(),
    "worker scope condition": lambda d, mg, w: _policy(
        w, "minicluster-controller-scope.minicluster.dev")["spec"]["matchConditions"].pop(),
    "worker without its jobs policy": lambda d, mg, w: _drop(w, POLICY_KINDS[0], WORKER_POLICIES[1]),
    "worker csidriver": lambda d, mg, w: m.find(w, "CSIDriver")[0]["spec"].update(
        podInfoOnMount=False),
}


def check_multikueue(kustomize, deploy_dir, objects, serve_flags, global_flags):
    """Both variants render, as checked above; the worker passes every check
    of deploy/'s render; `kustomize edit set image` in components/image (as
    its kustomization.yaml says) pins both workloads of deploy/ and of both
    variants, and no other kustomization names the image (it would not
    apply: the component renames it first)."""
    manager, worker = (m.render(kustomize, os.path.join(deploy_dir, o)) for o in OVERLAYS)
    errors = check_multikueue_objects(objects, manager, worker)
    errors += [f"worker: {e}" for e in check_objects(worker, serve_flags, global_flags)]
    image = "registry.example/flux-curve-csi:check"
    with tempfile.TemporaryDirectory() as tmp:
        copy_dir = os.path.join(tmp, "deploy")
        shutil.copytree(deploy_dir, copy_dir)
        subprocess.run([kustomize, "edit", "set", "image", f"flux-curve-csi={image}"],
                       cwd=os.path.join(copy_dir, "components", "image"), check=True,
                       capture_output=True)
        for overlay in ("",) + tuple(OVERLAYS):
            where = os.path.join(copy_dir, overlay)
            images = sorted({ct["image"] for o in m.render(kustomize, where)
                             if o["kind"] in ("Deployment", "DaemonSet")
                             for ct in m.pod_spec(o)["containers"]})
            if images != [image]:
                errors.append(f"deploy/{overlay}: after kustomize edit set image in "
                              f"components/image: {images}")
    for path in glob.glob(os.path.join(deploy_dir, "**", "kustomization.yaml"), recursive=True):
        if os.path.dirname(path) != os.path.join(deploy_dir, "components", "image"):
            with open(path) as f:
                if re.search(r"^images:", f.read(), re.M):
                    errors.append(f"{path}: images: belongs in components/image only")
    for name, mutate in MULTIKUEUE_MUTATIONS.items():
        broken = copy.deepcopy((objects, manager, worker))
        try:
            mutate(*broken)
        except (KeyError, IndexError) as e:
            errors.append(f"self-test: mutation {name!r} does not apply: {e!r}")
            continue
        if not check_multikueue_objects(*broken):
            errors.append(f"self-test: a broken variant ({name}) passed")
    print(f"{', '.join(OVERLAYS)}: {len(manager)} and {len(worker)} objects; "
          f"{len(MULTIKUEUE_MUTATIONS)} broken variants tried")
    return errors


def main():
    installer, deploy_dir, binary = sys.argv[1:4]
    kustomize = subprocess.run([installer], check=True, capture_output=True,
                               text=True).stdout.strip()
    objects = m.render(kustomize, deploy_dir)
    serve_flags = m.help_flags(binary, "serve")
    global_flags = m.help_flags(binary)
    kinds = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objects)
    print("rendered:", ", ".join(kinds))

    errors = check_objects(objects, serve_flags, global_flags)
    errors += check_opt_out(kustomize, deploy_dir, objects)
    errors += check_multikueue(kustomize, deploy_dir, objects, serve_flags, global_flags)
    if not errors:
        errors += driver_accepts_args(binary, _driver(objects)["args"])
    for name, mutate in MUTATIONS.items():
        broken = copy.deepcopy(objects)
        try:
            mutate(broken)
        except (KeyError, IndexError) as e:  # what it breaks is gone already
            errors.append(f"self-test: mutation {name!r} does not apply: {e!r}")
            continue
        if not check_objects(broken, serve_flags, global_flags):
            errors.append(f"self-test: a broken manifest ({name}) passed")
    for e in errors:
        print("FAIL:", e)
    print(f"deploy render check: {len(errors)} problem(s), "
          f"{len(MUTATIONS)} broken variants caught"
          if not errors else f"deploy render check: {len(errors)} problem(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
