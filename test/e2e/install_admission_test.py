#!/usr/bin/env python3
"""The install (`kubectl kustomize deploy/`) on an API server set up like a
managed cluster (issue 16, item 5):

- Pod Security Admission enforces (and warns and audits) `restricted` in
  every namespace without its own labels;
- the ResourceQuota admission plugin limits the system-node-critical and
  system-cluster-critical PriorityClasses as GKE does (limitedResources):
  pods of those classes are refused ("insufficient quota to match these
  scopes") in a namespace without a ResourceQuota whose scope matches them.

A DaemonSet or Deployment is not a pod: PSA only warns about their
templates, and the quota only counts pods. So besides the server-side dry
run of the whole install, pods made from the two workloads' templates are
dry-run in their namespaces (admitted; the controller's namespace enforces
`restricted` itself) and in namespaces without the driver's labels or its
quota (the driver's refused, for the reason each guard gives; the
controller's admitted under `restricted`).

  test/e2e/install_admission_test.py [TEST...]
"""

import copy
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_lib import (REPO, check, check_eq, get, kubectl, log, main, wait_for)  # noqa: E402

NAMESPACE = "flux-curve-csi"
CONTROLLER_NAMESPACE = "minicluster-system"
CRITICAL = ["system-node-critical", "system-cluster-critical"]

# What GKE-like clusters run with: the PodSecurity plugin's cluster-wide
# defaults, and GKE's limit on the critical PriorityClasses (the scopes of
# its kube-system quota gcp-critical-pods).
ADMISSION = {
    "apiVersion": "apiserver.config.k8s.io/v1",
    "kind": "AdmissionConfiguration",
    "plugins": [
        {"name": "PodSecurity", "configuration": {
            "apiVersion": "pod-security.admission.config.k8s.io/v1",
            "kind": "PodSecurityConfiguration",
            "defaults": {level: "restricted" for level in ("enforce", "warn", "audit")} | {
                f"{level}-version": "latest" for level in ("enforce", "warn", "audit")},
            "exemptions": {"usernames": [], "runtimeClasses": [], "namespaces": []}}},
        {"name": "ResourceQuota", "configuration": {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "ResourceQuotaConfiguration",
            "limitedResources": [{"resource": "pods", "matchScopes": [
                {"scopeName": "PriorityClass", "operator": "In", "values": CRITICAL}]}]}},
    ],
}


def rendered():
    import yaml  # python3-yaml
    text = kubectl("kustomize", os.path.join(REPO, "deploy")).stdout
    return text, [o for o in yaml.safe_load_all(text) if o]


def find(objects, kind):
    found = [o for o in objects if o["kind"] == kind]
    check(len(found) == 1, f"deploy/ render: expected one {kind}, found {len(found)}")
    return found[0]


def pod_from(workload, ns):
    """The Pod its controller would create from `workload`'s template."""
    template = copy.deepcopy(workload["spec"]["template"])
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{workload['metadata']['name']}-dry-run", "namespace": ns,
                         "labels": template["metadata"].get("labels", {})},
            "spec": template["spec"]}


def dry_run_pod(pod):
    """(admitted, what the server said)."""
    r = kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check_rc=False)
    return r.returncode == 0, (r.stdout + r.stderr).strip()


def moved_pod(pod, ns):
    return {**pod, "metadata": {**pod["metadata"], "namespace": ns}}


def admitted(pod, where):
    ok, out = dry_run_pod(pod)
    check(ok, f"{pod['metadata']['name']} in {where}: refused: {out}")
    log(f"{pod['metadata']['name']} in {where}: admitted")


def refused(pod, where, reason):
    ok, out = dry_run_pod(pod)
    check(not ok, f"{pod['metadata']['name']} in {where}: admitted, want refused ({reason})")
    check(reason in out, f"{pod['metadata']['name']} in {where}: refused, but not for "
          f"{reason!r}: {out}")
    log(f"{pod['metadata']['name']} in {where}: refused: {out.splitlines()[-1][:200]}")


def test_admission_is_configured(work):
    """The API server runs with the config above: a privileged pod without a
    priority class is refused by PSA in a namespace without labels, and a
    critical pod by the quota in one labelled privileged. Without this the
    other test proves nothing."""
    kubectl("create", "namespace", "probe-restricted")
    kubectl("create", "namespace", "probe-critical")
    kubectl("label", "namespace", "probe-critical", "pod-security.kubernetes.io/enforce=privileged")
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "probe", "namespace": "probe-restricted"},
           "spec": {"automountServiceAccountToken": False,
                    "containers": [{"name": "c", "image": "example.invalid/probe:1",
                                    "securityContext": {"privileged": True}}]}}
    refused(pod, "an unlabelled namespace", 'violates PodSecurity "restricted:latest"')
    pod["metadata"]["namespace"] = "probe-critical"
    admitted(pod, "a namespace labelled privileged")
    pod["spec"]["priorityClassName"] = "system-node-critical"
    refused(pod, "a namespace labelled privileged, without a quota",
            "insufficient quota to match these scopes")


def wait_quota_status(name, ns):
    # Quota admission refuses pods it matches until the resourcequota
    # controller has written the quota's status ("status unknown for quota").
    wait_for(f"ResourceQuota {ns}/{name} status", lambda: (get("resourcequota", name, ns) or {})
             .get("status", {}).get("hard"), timeout=60)


def test_install(work):
    text, objects = rendered()
    ds, deployment = find(objects, "DaemonSet"), find(objects, "Deployment")
    quota = find(objects, "ResourceQuota")
    check_eq((ds["metadata"]["namespace"], deployment["metadata"]["namespace"]),
             (NAMESPACE, CONTROLLER_NAMESPACE), "the workloads' namespaces")

    # As docs/admin/install.md installs: the namespace file first (its labels
    # in place before any pod), the master key Secret, then everything. The
    # controller's namespace too, here only: a dry run creates none.
    kubectl("apply", "-f", os.path.join(REPO, "deploy", "daemonset", "namespace.yaml"))
    kubectl("apply", "-f", os.path.join(REPO, "deploy", "controller", "namespace.yaml"))
    kubectl("-n", NAMESPACE, "create", "secret", "generic", "flux-curve-csi-master-key",
            "--from-literal=master.key=" + "k" * 64)
    r = kubectl("apply", "--dry-run=server", "-f", "-", input=text, check_rc=False, timeout=120)
    check(r.returncode == 0, f"install dry run refused: {r.stderr.strip()}")
    lines = r.stdout.strip().splitlines()
    check_eq(len(lines), len(objects), "objects in the install dry run")
    check(all("(server dry run)" in ln for ln in lines), f"unexpected output: {r.stdout}")
    # PSA only warns about workloads: with `restricted` as the cluster's
    # warn default, a warning here is a pod that would be refused (or the
    # namespace's warn label missing).
    warnings = [ln for ln in r.stderr.splitlines() if "PodSecurity" in ln]
    check_eq(warnings, [], "PodSecurity warnings in the install dry run")
    log(f"install dry run: {len(lines)} objects pass, no PodSecurity warnings")

    # Stored for real (no DaemonSet or Deployment controller runs here: no
    # pods), so the pods below meet the quota and ServiceAccounts they need.
    kubectl("apply", "-f", "-", input=text, timeout=120)
    wait_quota_status(quota["metadata"]["name"], NAMESPACE)
    driver = pod_from(ds, NAMESPACE)
    controller = pod_from(deployment, CONTROLLER_NAMESPACE)
    admitted(driver, NAMESPACE)
    check_eq(get("namespace", CONTROLLER_NAMESPACE)["metadata"]["labels"].get(
        "pod-security.kubernetes.io/enforce"), "restricted", f"{CONTROLLER_NAMESPACE} enforces")
    admitted(controller, CONTROLLER_NAMESPACE)
    # The same namespace refuses what the driver's pod needs (its
    # ServiceAccount made there, so the refusal is PodSecurity's).
    kubectl("-n", CONTROLLER_NAMESPACE, "create", "serviceaccount", driver["spec"]["serviceAccountName"])
    refused(moved_pod(driver, CONTROLLER_NAMESPACE), CONTROLLER_NAMESPACE,
            'violates PodSecurity "restricted:latest"')

    # The same pods where the install's labels or quota are missing. Their
    # ServiceAccounts exist, so the refusals are the guards', not a lookup's.
    def namespace(name, labels=()):
        kubectl("create", "namespace", name)
        if labels:
            kubectl("label", "namespace", name, *labels)
        for pod in (driver, controller):
            kubectl("-n", name, "create", "serviceaccount", pod["spec"]["serviceAccountName"])
        return name

    moved = moved_pod

    ns_labels = [f"{k}={v}" for k, v in
                 get("namespace", NAMESPACE)["metadata"]["labels"].items()
                 if k.startswith("pod-security.kubernetes.io/")]
    check(ns_labels, f"namespace {NAMESPACE} has no pod-security labels")
    plain = namespace("no-labels")
    refused(moved(driver, plain), "a namespace without the PSA labels",
            'violates PodSecurity "restricted:latest"')
    admitted(moved(controller, plain), "a namespace without the PSA labels (restricted)")

    no_quota = namespace("labels-no-quota", ns_labels)
    refused(moved(driver, no_quota), "a namespace with the labels but no quota",
            "insufficient quota to match these scopes")
    admitted(moved(controller, no_quota), "a namespace with the labels but no quota")
    # The install's quota is what lets the driver in.
    kubectl("apply", "-f", "-", input=json.dumps(
        {**quota, "metadata": {**quota["metadata"], "namespace": no_quota}}))
    wait_quota_status(quota["metadata"]["name"], no_quota)
    admitted(moved(driver, no_quota), "the same namespace with the install's quota")


if __name__ == "__main__":
    main([test_admission_is_configured, test_install], needs_controller=False, crd=False,
         admission_config=ADMISSION)
