#!/usr/bin/env python3
"""Renders charts/flux-curve-csi with helm and deploy/ with kustomize (the
source of truth) and checks that they are the same objects: with default
values exactly, and with each value changed exactly as that value says (the
expected objects are made from the kustomize render here, so a template that
misses one place fails). multikueue.role=manager and =worker render exactly
what deploy/multikueue/manager and deploy/multikueue/worker do. Every
difference is listed, by object and field.

usage: check_chart.py INSTALL_HELM INSTALL_KUSTOMIZE CHART_DIR DEPLOY_DIR
(INSTALL_*: scripts/build-helm and scripts/build-kustomize, which print
the path of the tool, building it once)
"""

import copy
import shutil
import subprocess
import sys
import tempfile

import manifests as m

KUBELET_DIR = "/var/lib/kubelet"
IMAGE = "ghcr.io/flux-curve-csi/flux-curve-csi:v0.1.0"
FLUX_OPERATOR = "system:serviceaccount:operator-system:operator-controller-manager"
FLUX_OPERATOR_MOVED = "system:serviceaccount:flux-op:fo"
FLUX_OPERATOR_UID = "0f4f2b8e-6c1d-4d5e-9a7b-3c2e1f0a9b8c"
DRIVER_NS = "flux-curve-csi"
CONTROLLER_NS = "minicluster-system"
ADMISSION_KINDS = {"ValidatingAdmissionPolicy",
                   "ValidatingAdmissionPolicyBinding"}
# multikueue.role -> the kustomize overlay it renders, under DEPLOY_DIR.
ROLES = {"manager": "multikueue/manager", "worker": "multikueue/worker"}


def tool(script):
    """The path scripts/install-* prints (its build log goes to stderr)."""
    return subprocess.run([script], check=True, stdout=subprocess.PIPE,
                          text=True).stdout.strip()


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}:\n{p.stderr}")
    return p.stdout


def key(obj):
    md = obj.get("metadata", {})
    return (obj.get("apiVersion"), obj.get("kind"), md.get("namespace"),
            md.get("name"))


def label(k):
    return "/".join(x for x in (k[1], k[2], k[3]) if x)


def keyed(objects, what):
    result = {}
    for o in objects:
        k = key(o)
        if k in result:
            sys.exit(f"FAIL: {what} has {label(k)} twice")
        result[k] = o
    return result


def diff(got, want, path=""):
    """Paths where `got` (the chart's) differs from `want`, readable."""
    if isinstance(got, dict) and isinstance(want, dict):
        out = []
        for k in sorted(set(got) | set(want), key=str):
            p = f"{path}.{k}" if path else str(k)
            if k not in got:
                out.append(f"{p}: missing in chart (expected {want[k]!r})")
            elif k not in want:
                out.append(f"{p}: not expected (chart has {got[k]!r})")
            else:
                out += diff(got[k], want[k], p)
        return out
    if isinstance(got, list) and isinstance(want, list):
        out = []
        for i in range(max(len(got), len(want))):
            p = f"{path}[{i}]"
            if i >= len(got):
                out.append(f"{p}: missing in chart (expected {want[i]!r})")
            elif i >= len(want):
                out.append(f"{p}: not expected (chart has {got[i]!r})")
            else:
                out += diff(got[i], want[i], p)
        return out
    if got != want or type(got) is not type(want):
        return [f"{path}: chart {got!r} != expected {want!r}"]
    return []


def compare(got, want):
    got, want = keyed(got, "chart"), keyed(want, "expected")
    out = [f"{label(k)}: missing in chart" for k in want if k not in got]
    out += [f"{label(k)}: not expected, chart renders it"
            for k in got if k not in want]
    for k in want:
        if k in got:
            out += [f"{label(k)}: {d}" for d in diff(got[k], want[k])]
    return out


def map_strings(obj, f, parent_key=None):
    """`obj` with f(parent_key, s) applied to every string value."""
    if isinstance(obj, dict):
        return {k: map_strings(v, f, k) for k, v in obj.items()}
    if isinstance(obj, list):
        return [map_strings(v, f, parent_key) for v in obj]
    if isinstance(obj, str):
        return f(parent_key, obj)
    return obj


def strings(obj):
    out = []
    map_strings(obj, lambda _, s: out.append(s) or s)
    return out


def containers(objects):
    for o in objects:
        spec = m.pod_spec(o)
        if spec:
            yield from spec.get("containers", [])


# The expected objects for each changed value, made from kustomize's.

def with_kubelet_dir(objects, new):
    return [map_strings(o, lambda _, s: s.replace(KUBELET_DIR, new))
            for o in objects]


def with_image(objects, image=None, pull_policy=None):
    objects = copy.deepcopy(objects)
    for c in containers(objects):
        if c.get("image") == IMAGE:
            if image:
                c["image"] = image
            if pull_policy:
                c["imagePullPolicy"] = pull_policy
    return objects


def with_namespace(objects, old, new):
    """Every place the namespace is named: namespace fields, the Namespace
    itself, and the admission policies' CEL (a string literal 'old', or the
    ServiceAccount user system:serviceaccount:old:NAME)."""
    def f(k, s):
        if k == "namespace" and s == old:
            return new
        s = s.replace(f"'{old}'", f"'{new}'")
        return s.replace(f"system:serviceaccount:{old}:",
                         f"system:serviceaccount:{new}:")
    out = []
    for o in objects:
        o = map_strings(o, f)
        if o["kind"] == "Namespace" and o["metadata"]["name"] == old:
            o["metadata"]["name"] = new
        out.append(o)
    return out


def without_kinds(objects, kinds):
    return [o for o in objects if o["kind"] not in kinds]


def with_namespaces(objects):
    """Both namespaces renamed, as namespaces.driver=csi-x and
    namespaces.controller=mc-x say."""
    return with_namespace(with_namespace(objects, DRIVER_NS, "csi-x"),
                          CONTROLLER_NS, "mc-x")


def namespaces_left(objects):
    """Namespace names with_namespaces() left. Whatever names the
    controller's namespace was found and changed; the driver's name is also
    the app's, so only its namespace uses are."""
    return [s for s in strings(objects)
            if CONTROLLER_NS in s or f"'{DRIVER_NS}'" in s
            or f":{DRIVER_NS}:" in s]


def kept_driver_namespace(objects, sets, errors):
    """`objects` without the one annotation the chart adds to deploy/: the
    driver's Namespace (the privileged one) holds the master key Secret, so
    Helm must never delete it (helm.sh/resource-policy: keep; issue 42,
    item 2). Checked here, then dropped for the comparison."""
    for o in objects:
        if o["kind"] != "Namespace" or o["metadata"].get("labels", {}).get(
                "pod-security.kubernetes.io/enforce") != "privileged":
            continue
        notes = o["metadata"].get("annotations", {})
        if notes.pop("helm.sh/resource-policy", None) != "keep":
            errors.append(f"[{', '.join(sets) or 'defaults'}] the driver "
                          "Namespace lacks helm.sh/resource-policy: keep")
        if not notes:
            o["metadata"].pop("annotations", None)
    return objects


# Chart.yaml's kubeVersion refuses Kubernetes before 1.31; `helm template`
# checks it against the client's built-in version (v1.20.0 in a Helm built
# from source), so render for the version the tests run.
KUBE = ["--kube-version", "1.35.4"]


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    helm, kustomize = tool(sys.argv[1]), tool(sys.argv[2])
    chart, deploy = sys.argv[3], sys.argv[4]

    def render(*sets):
        args = [a for s in sets for a in ("--set", s)]
        return kept_driver_namespace(
            m.load_all(run([helm, "template", "flux-curve-csi", chart,
                            "--include-crds", *KUBE, *args])), sets, errors)

    errors = []
    base = m.render(kustomize, deploy)
    role = {r: m.render(kustomize, f"{deploy}/{d}") for r, d in ROLES.items()}
    with tempfile.TemporaryDirectory() as tmp:
        copy_dir = f"{tmp}/deploy"
        shutil.copytree(deploy, copy_dir)
        run([kustomize, "edit", "add", "component",
             "components/without-admission-policy"], cwd=copy_dir)
        without_policies = m.render(kustomize, copy_dir)
        # The same component in the worker overlay (it deletes by kind, so
        # policy.yaml's policies too).
        run([kustomize, "edit", "add", "component",
             "../../components/without-admission-policy"],
            cwd=f"{copy_dir}/{ROLES['worker']}")
        worker_without_policies = m.render(kustomize,
                                           f"{copy_dir}/{ROLES['worker']}")
        # The flux-operator's identity, changed and left out, as
        # components/flux-operator/kustomization.yaml says.
        operator_dir = f"{tmp}/deploy-operator"
        shutil.copytree(deploy, operator_dir)
        component = f"{operator_dir}/components/flux-operator/kustomization.yaml"
        with open(component) as f:
            text = f.read()
        with open(component, "w") as f:
            f.write(text.replace(f"'{FLUX_OPERATOR}'", f"'{FLUX_OPERATOR_MOVED}'"))
        operator_moved = m.render(kustomize, operator_dir)
        with open(component, "w") as f:
            f.write(text.replace(f"'{FLUX_OPERATOR}'", "''"))
        operator_none = m.render(kustomize, operator_dir)
        # Its ServiceAccount's uid pinned (the component's second value).
        with open(component, "w") as f:
            f.write(text.replace('value: "\'\'"', f'value: "\'{FLUX_OPERATOR_UID}\'"'))
        operator_pinned = m.render(kustomize, operator_dir)

    def check(ok, message):
        if not ok:
            errors.append(f"kustomize side: {message}")

    # The transforms must have something to change, or they prove nothing.
    check(any(KUBELET_DIR in s for s in strings(base)),
          f"no {KUBELET_DIR} in deploy/")
    check(sum(c.get("image") == IMAGE for c in containers(base)) == 2,
          f"not two containers of image {IMAGE}")
    dropped = {key(o) for o in base} - {key(o) for o in without_policies}
    check(dropped and {k[1] for k in dropped} == ADMISSION_KINDS
          and len(without_policies) + len(dropped) == len(base),
          "components/without-admission-policy does not drop exactly the "
          f"admission policies: {sorted(map(label, dropped))}")
    check(m.find(base, "NetworkPolicy"), "no NetworkPolicy in deploy/")
    check(compare(operator_moved, base) and compare(operator_none, base)
          and compare(operator_pinned, base),
          "editing components/flux-operator changes nothing")

    ns = with_namespaces(base)
    ns_role = {r: with_namespaces(objs) for r, objs in role.items()}
    for what, objs in [("deploy/", ns)] + [
            (ROLES[r], o) for r, o in ns_role.items()]:
        left = namespaces_left(objs)
        check(not left,
              f"{what}: namespace names left after the transform: {left}")
    # Each overlay differs from deploy/, or its case proves nothing; the
    # worker's own policies name both namespaces and the controller's user.
    for r, objs in role.items():
        check(compare(objs, base), f"{ROLES[r]} renders what deploy/ does")
    extra = [o for o in role["worker"] if key(o) not in {key(b) for b in base}
             and o["kind"] == "ValidatingAdmissionPolicy"]
    check(len(extra) == 2 and all(
              with_namespace([o], DRIVER_NS, "csi-x") != [o] and
              with_namespace([o], CONTROLLER_NS, "mc-x") != [o]
              for o in extra),
          f"{ROLES['worker']}: not two policies of its own naming both "
          f"namespaces: {[o['metadata']['name'] for o in extra]}")
    dropped = {key(o) for o in role["worker"]} - {
        key(o) for o in worker_without_policies}
    check(dropped and {k[1] for k in dropped} == ADMISSION_KINDS
          and len(worker_without_policies) + len(dropped)
          == len(role["worker"]),
          f"{ROLES['worker']} with components/without-admission-policy does "
          f"not drop exactly the admission policies: "
          f"{sorted(map(label, dropped))}")

    cases = [
        ("defaults", [], base),
        ("kubeletDir=/data/kubelet", ["kubeletDir=/data/kubelet"],
         with_kubelet_dir(base, "/data/kubelet")),
        ("kubeletDir=/data/kubelet/ (trailing slash)",
         ["kubeletDir=/data/kubelet/"],
         with_kubelet_dir(base, "/data/kubelet")),
        ("image.repository, image.tag",
         ["image.repository=registry.example.com/fcc", "image.tag=v9.9.9"],
         with_image(base, image="registry.example.com/fcc:v9.9.9")),
        ("image.pullPolicy=Always", ["image.pullPolicy=Always"],
         with_image(base, pull_policy="Always")),
        ("namespaces.driver=csi-x, namespaces.controller=mc-x",
         ["namespaces.driver=csi-x", "namespaces.controller=mc-x"], ns),
        ("namespaces.create=false", ["namespaces.create=false"],
         without_kinds(base, {"Namespace"})),
        ("admissionPolicy.enabled=false", ["admissionPolicy.enabled=false"],
         without_policies),
        ("fluxOperator.namespace=flux-op, fluxOperator.serviceAccount=fo",
         ["fluxOperator.namespace=flux-op", "fluxOperator.serviceAccount=fo"],
         operator_moved),
        ("fluxOperator.serviceAccount=", ["fluxOperator.serviceAccount="],
         operator_none),
        (f"fluxOperator.serviceAccountUid={FLUX_OPERATOR_UID}",
         [f"fluxOperator.serviceAccountUid={FLUX_OPERATOR_UID}"], operator_pinned),
        ("fluxOperator.serviceAccount=, fluxOperator.serviceAccountUid (no operator, "
         "no uid)", ["fluxOperator.serviceAccount=",
                     f"fluxOperator.serviceAccountUid={FLUX_OPERATOR_UID}"], operator_none),
        ("networkPolicies.enabled=false", ["networkPolicies.enabled=false"],
         without_kinds(base, {"NetworkPolicy"})),
        ("multikueue.role=manager", ["multikueue.role=manager"],
         role["manager"]),
        ("multikueue.role=worker", ["multikueue.role=worker"],
         role["worker"]),
        ("multikueue.role=manager, namespaces.driver=csi-x, "
         "namespaces.controller=mc-x",
         ["multikueue.role=manager", "namespaces.driver=csi-x",
          "namespaces.controller=mc-x"], ns_role["manager"]),
        ("multikueue.role=worker, namespaces.driver=csi-x, "
         "namespaces.controller=mc-x",
         ["multikueue.role=worker", "namespaces.driver=csi-x",
          "namespaces.controller=mc-x"], ns_role["worker"]),
        ("multikueue.role=worker, admissionPolicy.enabled=false",
         ["multikueue.role=worker", "admissionPolicy.enabled=false"],
         worker_without_policies),
    ]
    # A difference already found with defaults is listed once, there.
    seen = set()
    for name, sets, want in cases:
        found = [e for e in compare(render(*sets), want) if e not in seen]
        seen.update(found)
        errors += [f"[{name}] {e}" for e in found]

    # Values that would break the CEL, the paths or the YAML are refused
    # (issue 42, item 8: kubeletDir goes into hostPaths, image.* into the
    # containers; the controller beside the master key is refused too).
    for bad in (["namespaces.driver=Bad_NS"], ["namespaces.controller=a'b"],
                ["kubeletDir=relative/kubelet"], ["multikueue.role=both"],
                ["kubeletDir=/var/lib/kubelet#x"],
                ["kubeletDir=/var/lib/kube let"],
                ["kubeletDir=/var/lib/../../etc"], ["kubeletDir=/var//lib"],
                ["kubeletDir=/var/lib/kubelet/.."], ["kubeletDir=/"],
                ["namespaces.controller=flux-curve-csi"],
                ["namespaces.driver=shared", "namespaces.controller=shared"],
                ["image.repository=registry.example.com/fcc #x"],
                ["image.repository=registry.example.com/fcc\nx: y"],
                ["image.tag=v1 x"], ["image.tag=v1:x"], ["image.tag=v1#x"],
                ["fluxOperator.namespace=a'b"], ["fluxOperator.serviceAccount=a'b"],
                ["fluxOperator.serviceAccountUid=a'b"],
                ["fluxOperator.serviceAccountUid=operator-controller-manager"]):
        p = subprocess.run([helm, "template", "x", chart, *KUBE,
                            *[a for s in bad for a in ("--set", s)]],
                           capture_output=True, text=True)
        if p.returncode == 0:
            errors.append(f"[{', '.join(bad)}] chart renders it; want a "
                          "values error")
        elif not any(w in p.stderr for w in ("values", "namespaces.")):
            errors.append(f"[{', '.join(bad)}] refused without naming the "
                          f"value: {p.stderr.strip()[:200]}")
    # ...and ordinary ones still render.
    for good in (["kubeletDir=/var/snap/microk8s/common/var/lib/kubelet"],
                 ["kubeletDir=/var/lib/k0s/kubelet/"],
                 ["image.repository=registry.example.com:5000/team/fcc",
                  "image.tag=v0.1.0-rc.1_b2"],
                 ["image.tag=v1@sha256:" + "a" * 64]):
        p = subprocess.run([helm, "template", "x", chart, *KUBE,
                            *[a for s in good for a in ("--set", s)]],
                           capture_output=True, text=True)
        if p.returncode != 0:
            errors.append(f"[{', '.join(good)}] refused: {p.stderr.strip()}")

    # The comparison itself catches a changed field.
    broken = copy.deepcopy(base)
    for c in containers(broken):
        c["image"] = "x"
    if len(compare(broken, base)) != 2:
        errors.append("compare() misses changed fields")

    for e in errors:
        print(f"FAIL {e}")
    if errors:
        sys.exit(f"{len(errors)} difference(s) between the chart and deploy/")
    print(f"ok: chart == kustomize build deploy/ ({len(base)} objects), "
          f"multikueue.role=manager/worker == deploy/{ROLES['manager']} and "
          f"deploy/{ROLES['worker']} ({len(role['manager'])} and "
          f"{len(role['worker'])} objects), and {len(cases) - 1} changed "
          f"values change exactly their places")


if __name__ == "__main__":
    main()
