#!/usr/bin/env python3
"""Every manifest in deploy/ and examples/ passes `kubectl apply
--dry-run=server` on the real API server (issue 5, item 4): schema, CEL
rules, admission (e.g. privileged pods) and RBAC object validation, without
storing anything. examples/kueue needs Kueue's CRDs: they come from Kueue's
module zip (`go mod download sigs.k8s.io/kueue@KUEUE_VERSION`). The CRD's
short name and category resolve to our MiniClusters next to flux-operator's
(issue 16, item 4).

  test/e2e/manifests_dry_run_test.py [TEST...]   (GO=path/to/go)
"""

import glob
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_lib import (REPO, apply, check, check_eq, create_namespace, install_crd,  # noqa: E402
                     items, kubectl, log, main, minicluster, wait_for)

KUEUE_VERSION = "v0.17.0"
NAMESPACE = "flux-curve-csi"
CONTROLLER_NAMESPACE = "minicluster-system"


def manifests(top):
    """YAML files under `top` that are objects (not kustomizations)."""
    files = sorted(glob.glob(os.path.join(REPO, top, "**", "*.yaml"), recursive=True))
    return [f for f in files if os.path.basename(f) != "kustomization.yaml"]


def dry_run(what, *args, input=None):
    r = kubectl("apply", "--dry-run=server", *args, input=input, check_rc=False, timeout=120)
    check(r.returncode == 0, f"{what}: server dry-run refused: {r.stderr.strip()}")
    for warning in sorted({ln for ln in r.stderr.splitlines() if ln.startswith("Warning:")}):
        log(f"{what}: {warning}")  # e.g. deprecated API versions: worth seeing
    lines = r.stdout.strip().splitlines()
    check(lines and all("(server dry run)" in ln for ln in lines),
          f"{what}: unexpected output: {r.stdout.strip()}")
    return lines


def kueue_crds(work):
    go = os.environ.get("GO") or shutil.which("go") or "/usr/local/go/bin/go"
    check(os.access(go, os.X_OK), f"no Go toolchain at {go} (set GO)")
    r = subprocess.run([go, "mod", "download", "-json", f"sigs.k8s.io/kueue@{KUEUE_VERSION}"],
                       cwd=work, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "GOFLAGS": "-mod=mod"})
    check(r.returncode == 0, f"go mod download kueue: {r.stdout.strip()} {r.stderr.strip()}")
    crds = sorted(glob.glob(os.path.join(json.loads(r.stdout)["Dir"],
                                         "config/components/crd/bases/*.yaml")))
    check(len(crds) >= 5, f"Kueue CRDs not found in the module: {crds}")
    return crds


def test_deploy(work):
    # As if applied: a dry run creates no namespace for the objects in it.
    for ns in (NAMESPACE, CONTROLLER_NAMESPACE):
        kubectl("create", "namespace", ns, "--save-config")
    rendered = kubectl("kustomize", os.path.join(REPO, "deploy")).stdout
    lines = dry_run("kubectl kustomize deploy/", "-f", "-", input=rendered)
    kinds = {ln.split("/")[0].split(".")[0] for ln in lines}
    for kind in ("customresourcedefinition", "csidriver", "daemonset", "deployment",
                 "serviceaccount", "clusterrole", "clusterrolebinding", "role", "rolebinding",
                 "networkpolicy", "resourcequota", "namespace", "validatingadmissionpolicy",
                 "validatingadmissionpolicybinding"):
        check(kind in kinds, f"deploy/ render has no {kind}: {kinds}")
    log(f"deploy/ (kustomize): {len(lines)} objects pass")
    # The policies are deploy/admission-policy/'s, which renders on its own.
    policy_text = kubectl("kustomize", os.path.join(REPO, "deploy", "admission-policy")).stdout
    policy_lines = dry_run("kubectl kustomize deploy/admission-policy/", "-f", "-",
                           input=policy_text)
    policies = sorted(ln.split(" ")[0] for ln in policy_lines)
    check_eq(sorted(ln.split(" ")[0] for ln in lines if ln.startswith("validatingadmission")),
             policies, "admission policies in deploy/'s render")
    for name in ("curve-volume-pods", "curve-volume-jobs", "curve-volume-count",
                 "minicluster-controller-scope",
                 "minicluster-controller-owner", "minicluster-controller-jobs",
                 "minicluster-controller-job-spec", "minicluster-controller-services",
                 "minicluster-controller-networkpolicies"):
        for b in ("", "binding"):
            want = f"validatingadmissionpolicy{b}.admissionregistration.k8s.io/{name}.minicluster.dev"
            check(want in policies, f"deploy/admission-policy/ has no {want}: {policies}")
    log(f"deploy/admission-policy/ (kustomize): {len(policy_lines)} objects pass")
    # The opt-out (docs/admin/install.md): deploy/ with the component added by
    # hand, as on a cluster without ValidatingAdmissionPolicy.
    copy = os.path.join(work, "deploy-opt-out")
    shutil.copytree(os.path.join(REPO, "deploy"), copy)
    with open(os.path.join(copy, "kustomization.yaml"), "a") as f:
        f.write("components:\n  - components/without-admission-policy\n")
    opt_out = dry_run("deploy/ + components/without-admission-policy", "-f", "-",
                      input=kubectl("kustomize", copy).stdout)
    check_eq(sorted(opt_out), sorted(ln for ln in lines if not ln.startswith("validatingadmission")),
             "the opt-out's objects (deploy/'s but the policies)")
    log(f"deploy/ without admission policy (component): {len(opt_out)} objects pass")
    # The MultiKueue variants (docs/admin/multikueue.md): the manager has no
    # driver, the worker everything and its own policies.
    for overlay, absent, extra in (
            ("manager", ("csidriver", "daemonset", "resourcequota"), ()),
            ("worker", (), ("minicluster-controller-multikueue", "multikueue-curve-volume-jobs"))):
        where = os.path.join(REPO, "deploy", "multikueue", overlay)
        got = dry_run(f"kubectl kustomize deploy/multikueue/{overlay}/", "-f", "-",
                      input=kubectl("kustomize", where).stdout)
        kinds = {ln.split("/")[0].split(".")[0] for ln in got}
        check(not kinds & set(absent), f"deploy/multikueue/{overlay}/ has {kinds & set(absent)}")
        want = sorted([ln.split(" ")[0] for ln in policy_lines] + [
            f"validatingadmissionpolicy{b}.admissionregistration.k8s.io/{name}.minicluster.dev"
            for name in extra for b in ("", "binding")])
        check_eq(sorted(ln.split(" ")[0] for ln in got if ln.startswith("validatingadmission")),
                 want, f"admission policies in deploy/multikueue/{overlay}/")
        log(f"deploy/multikueue/{overlay}/ (kustomize): {len(got)} objects pass")
    for f in manifests("deploy"):
        n = len(dry_run(os.path.relpath(f, REPO), "-f", f))
        log(f"{os.path.relpath(f, REPO)}: {n} objects pass")
    # Dry run stored nothing.
    check_eq(items("daemonsets", NAMESPACE), [], "DaemonSets after dry run")
    check_eq(items("deployments", CONTROLLER_NAMESPACE), [], "Deployments after dry run")
    check_eq(kubectl("get", "csidrivers", "-o", "name").stdout.strip(), "", "CSIDrivers after dry run")
    check_eq(kubectl("get", "validatingadmissionpolicies", "-o", "name").stdout.strip(), "",
             "ValidatingAdmissionPolicies after dry run")


# flux-operator's CRD as it names itself (config/crd/bases/
# flux-framework.org_miniclusters.yaml: same kind and plural as ours, no
# shortNames, no categories); its schema does not matter here.
FLUX_OPERATOR_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "miniclusters.flux-framework.org"},
    "spec": {"group": "flux-framework.org", "scope": "Namespaced",
             "names": {"kind": "MiniCluster", "listKind": "MiniClusterList",
                       "plural": "miniclusters", "singular": "minicluster"},
             "versions": [{"name": "v1alpha2", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {
                               "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}


def test_crd_names(work):
    """`kubectl get <short name>` and `kubectl get <category>` list only our
    MiniClusters, also with flux-operator's CRD installed beside ours."""
    install_crd()
    crd = json.loads(kubectl("get", "crd", "miniclusters.minicluster.dev", "-o", "json").stdout)
    names = crd["spec"]["names"]
    short, categories = names.get("shortNames", []), names.get("categories", [])
    check(short and categories, f"our CRD has no short names or no category: {names}")
    apply(FLUX_OPERATOR_CRD)
    kubectl("wait", "--for=condition=Established", "crd/miniclusters.flux-framework.org",
            "--timeout=60s", timeout=90)
    ns = "crd-names"
    create_namespace(ns)
    apply(minicluster("ours", ns))
    apply({"apiVersion": "flux-framework.org/v1alpha2", "kind": "MiniCluster",
           "metadata": {"name": "theirs", "namespace": ns}, "spec": {"size": 1}})
    calls = iter(range(1000))

    def listed(resource):
        # A fresh discovery cache each time: kubectl must resolve the name
        # from what the server serves now, not from an older cache.
        cache = os.path.join(work, f"kubectl-cache-{next(calls)}")
        r = kubectl("get", resource, "-n", ns, "-o", "name", f"--cache-dir={cache}")
        return sorted(r.stdout.split())

    ours, theirs = ["minicluster.minicluster.dev/ours"], ["minicluster.flux-framework.org/theirs"]
    check_eq(listed("miniclusters.minicluster.dev"), ours, "kubectl get miniclusters.minicluster.dev")
    check_eq(listed("miniclusters.flux-framework.org"), theirs,
             "kubectl get miniclusters.flux-framework.org")
    for name in short + categories:
        check_eq(listed(name), ours, f"kubectl get {name} (flux-operator's CRD installed too)")
    # The bare plural is what the full name, short name and category avoid:
    # kubectl picks one of the two groups by discovery order.
    log(f"kubectl get miniclusters resolves to {listed('miniclusters')}; "
        f"short names {short}, categories {categories} resolve to ours")
    kubectl("delete", "namespace", ns, "--wait=false")
    kubectl("delete", "crd", "miniclusters.flux-framework.org")


def test_examples(work):
    install_crd()  # MiniClusters need the CRD stored for real
    for f in manifests("examples"):
        if "/kueue/" in f or "/multikueue/" in f:
            continue
        dry_run(os.path.relpath(f, REPO), "-f", f)
        log(f"{os.path.relpath(f, REPO)} passes")
    check_eq(items("miniclusters.minicluster.dev", "default"), [], "MiniClusters after dry run")

    kueue = os.path.join(REPO, "examples", "kueue")
    rendered = kubectl("kustomize", kueue).stdout
    # Without Kueue the API server does not know its kinds: the check can fail.
    r = kubectl("apply", "--dry-run=server", "-f", "-", input=rendered, check_rc=False)
    check(r.returncode != 0 and "kueue.x-k8s.io" in r.stderr,
          f"examples/kueue passed without Kueue's CRDs: {r.stdout} {r.stderr}")

    crds = kueue_crds(work)
    # Server-side: Kueue's CRDs are too big for the last-applied annotation.
    for crd in crds:
        kubectl("apply", "--server-side", "-f", crd, timeout=120)
    names = [json.loads(kubectl("create", "--dry-run=client", "-o", "json", "-f", c).stdout)
             ["metadata"]["name"] for c in crds]
    for name in names:
        wait_for(f"CRD {name} Established", lambda n=name: kubectl(
            "get", "crd", n, "-o", "jsonpath={.status.conditions[?(@.type==\"Established\")].status}"
        ).stdout == "True", timeout=60)
    log(f"Kueue {KUEUE_VERSION}: {len(crds)} CRDs installed from its module")
    lines = dry_run("kubectl kustomize examples/kueue", "-f", "-", input=rendered)
    check_eq(len(lines), sum(1 for ln in rendered.splitlines() if ln.startswith("kind:")),
             "objects in examples/kueue that passed")
    for f in manifests("examples/kueue"):
        dry_run(os.path.relpath(f, REPO), "-f", f)
    log(f"examples/kueue: {len(lines)} objects pass (kustomize and each file)")
    # examples/multikueue: the manager's and a worker's objects, each file
    # on its own cluster; Kueue's namespace is there once Kueue is.
    create_namespace("kueue-system")
    for f in manifests("examples/multikueue"):
        n = len(dry_run(os.path.relpath(f, REPO), "-f", f))
        log(f"{os.path.relpath(f, REPO)}: {n} objects pass")


if __name__ == "__main__":
    main([test_deploy, test_crd_names, test_examples], needs_controller=False, crd=False)
