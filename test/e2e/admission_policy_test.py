#!/usr/bin/env python3
"""deploy/admission-policy/ on the real API server (issue 15, item 5).

Without the policies, anyone who may create pods in a namespace mounts any
MiniCluster's key there. With them, a curve.minicluster.dev volume is
admitted only in a pod the Job controller creates for a Job, and only
minicluster-controller's service account may create such a Job. Checked
step by step, so each refusal is shown to come from the policy: the same
request is admitted before the policy is applied. A normal user ("alice",
by impersonation) holds create rights on pods, Jobs and CronJobs in the
test namespace; the controller runs as its own ServiceAccount with
deploy/controller/rbac.yaml, as deployed.

  test/e2e/admission_policy_test.py [TEST...]   (FCC_CONTROLLER=path/to/binary)
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_lib import (REPO, Controller, apply, check, check_eq, create_namespace, get,  # noqa: E402
                     items, job_pods, kubectl, log, main, minicluster,
                     service_account_kubeconfig, wait_for)

POLICY_DIR = os.path.join(REPO, "deploy", "admission-policy")
PODS_POLICY = "curve-volume-pods.minicluster.dev"
JOBS_POLICY = "curve-volume-jobs.minicluster.dev"
DRIVER = "curve.minicluster.dev"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
CONTROLLER_NS, CONTROLLER_SA = "minicluster-system", "minicluster-controller"
USER = "alice"
IMAGE = "example.invalid/flux:e2e"


def curve_pod_spec(mc):
    return {"restartPolicy": "Never",
            "containers": [{"name": "c", "image": IMAGE,
                            "volumeMounts": [{"name": "curve", "mountPath": "/etc/flux/curve"}]}],
            "volumes": [{"name": "curve", "csi": {"driver": DRIVER, "readOnly": True,
                                                  "volumeAttributes": {"minicluster": mc}}}]}


def pod(name, ns, mc="lab", metadata=None):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, **(metadata or {})},
            "spec": curve_pod_spec(mc)}


def job(name, ns, mc="lab"):
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": ns},
            "spec": {"template": {"spec": curve_pod_spec(mc)}}}


def cronjob(name, ns, mc="lab"):
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name, "namespace": ns},
            "spec": {"schedule": "0 0 * * *", "jobTemplate": {"spec": job(name, ns, mc)["spec"]}}}


def create(obj, user=None, dry_run=False):
    """kubectl create as `user` (impersonated; None: the admin)."""
    args = (["--as", user] if user else []) + ["create", "-f", "-"]
    if dry_run:
        args.append("--dry-run=server")
    return kubectl(*args, input=json.dumps(obj), check_rc=False)


def check_admitted(r, what):
    check(r.returncode == 0, f"{what} was refused: {r.stderr.strip()}")


def check_refused(r, policy, user, what):
    """Refused by `policy`, with its message: what to do instead, and who asked."""
    err = r.stderr.strip()
    check(r.returncode != 0, f"{what} was admitted: {r.stdout.strip()}")
    check(f"ValidatingAdmissionPolicy '{policy}'" in err, f"{what}: not refused by {policy}: {err}")
    check("create a MiniCluster (minicluster.dev/v1alpha1)" in err, f"{what}: no fix in the message: {err}")
    check(f"(request by {user})" in err, f"{what}: the message does not name {user}: {err}")
    log(f"{what}: refused: {err.split('denied request: ', 1)[-1]}")


def wait_enforced(obj, user, what):
    """A policy takes effect once the API server's informers have it: wait
    until a dry run of `obj` is refused (dry runs pass admission too)."""
    wait_for(f"{what} refused (policy in force)",
             lambda: create(obj, user, dry_run=True).returncode != 0, timeout=30)


def events(ns, kind, name):
    return [(e["reason"], e["message"]) for e in items("events", ns)
            if e["involvedObject"]["kind"] == kind and e["involvedObject"]["name"] == name]


def grant_user(ns):
    """`USER` may create (and read, delete) pods, Jobs and CronJobs in `ns`:
    a namespace member who may run workloads, nothing more."""
    kubectl("create", "role", "workloads", "-n", ns, "--verb=create,get,list,delete",
            "--resource=pods,jobs,cronjobs")
    kubectl("create", "rolebinding", "workloads", "-n", ns, "--role=workloads", f"--user={USER}")


def test_job_controller_identity(work):
    """What the API server tells admission about a pod the Job controller
    creates: request.userInfo is the Job controller's own ServiceAccount
    (kube-controller-manager runs with --use-service-account-credentials),
    the identity pods.yaml admits. A probe policy in a namespace of its own
    refuses every pod and names the requester; the refusal shows in the
    Job's FailedCreate event."""
    ns = "e2e-vap-probe"
    create_namespace(ns)
    probe = "probe-who-creates-pods.minicluster.dev"
    apply({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
           "metadata": {"name": probe},
           "spec": {"failurePolicy": "Fail",
                    "matchConstraints": {
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                        "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                           "operations": ["CREATE"], "resources": ["pods"]}]},
                    "validations": [{"expression": "false", "messageExpression":
                                     "'creator=' + request.userInfo.username + ';'"}]}})
    apply({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
           "metadata": {"name": probe}, "spec": {"policyName": probe, "validationActions": ["Deny"]}})
    try:
        wait_enforced({**pod("p", ns), "spec": {"containers": [{"name": "c", "image": IMAGE}]}},
                      None, "a probe pod")
        kubectl("create", "job", "probe", "-n", ns, f"--image={IMAGE}")
        failed = wait_for("the probe Job's FailedCreate event", lambda: [
            m for r, m in events(ns, "Job", "probe") if r == "FailedCreate" and "creator=" in m])
        creator = failed[0].split("creator=", 1)[1].split(";", 1)[0]
        log(f"pods of a Job are created by {creator}")
        check_eq(creator, JOB_CONTROLLER, "request.userInfo.username of the Job controller's pod create")
        check_eq(job_pods(ns, "probe"), [], "pods of the probe Job")
    finally:
        kubectl("delete", "validatingadmissionpolicybinding", probe, "--ignore-not-found")
        kubectl("delete", "validatingadmissionpolicy", probe, "--ignore-not-found")


def test_policy(work):
    """The hole, then each policy closing its part of it, then the
    controller's MiniClusters still getting their Jobs and pods."""
    ns = "e2e-vap"
    create_namespace(ns)
    grant_user(ns)

    # 1. No policy: a pod author mounts MiniCluster "lab"'s key by naming it.
    check_admitted(create(pod("thief", ns), USER), "a hand-made pod with the curve volume, no policy")
    kubectl("delete", "pod", "thief", "-n", ns, "--wait=false")

    # 2. pods.yaml alone: hand-made pods are refused, whatever they claim.
    kubectl("apply", "-f", os.path.join(POLICY_DIR, "pods.yaml"))
    wait_enforced(pod("thief", ns), USER, "a hand-made pod")
    check_refused(create(pod("thief", ns), USER), PODS_POLICY, USER, "a hand-made pod")
    # Labels and a Job controller reference are the pod author's to write.
    forged = pod("forged", ns, metadata={
        "labels": {"app.kubernetes.io/managed-by": "minicluster-controller",
                   "minicluster.dev/name": "lab", "batch.kubernetes.io/job-name": "lab",
                   "batch.kubernetes.io/job-completion-index": "0"},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "lab",
                             "uid": "00000000-0000-0000-0000-000000000001", "controller": True}]})
    check_refused(create(forged, USER), PODS_POLICY, USER, "a pod with forged labels and Job owner")
    check_refused(create(pod("admin", ns)), PODS_POLICY, "admin", "a pod by the cluster admin")
    # ...but a Job's pods come from the Job controller: the hole jobs.yaml closes.
    check_admitted(create(job("via-job", ns), USER), "a hand-made Job, pods.yaml alone")
    wait_for("the Job controller's pod for alice's Job", lambda: job_pods(ns, "via-job"))
    log("pods.yaml alone: a user's Job still gets a pod with the curve volume")
    kubectl("delete", "job", "via-job", "-n", ns, "--cascade=background", "--wait=false")

    # 3. Both policies (the kustomization as shipped).
    kubectl("apply", "-k", POLICY_DIR)
    wait_enforced(job("thief", ns), USER, "a hand-made Job")
    check_refused(create(job("thief", ns), USER), JOBS_POLICY, USER, "a hand-made Job")
    check_refused(create(cronjob("thief", ns), USER), JOBS_POLICY, USER, "a hand-made CronJob")
    check_refused(create(job("admin", ns)), JOBS_POLICY, "admin", "a Job by the cluster admin")
    # Only CREATE is matched: volumes of pods and Job templates are immutable.
    plain = job("plain", ns)
    plain["spec"]["suspend"] = True
    del plain["spec"]["template"]["spec"]["volumes"]
    plain["spec"]["template"]["spec"]["containers"][0].pop("volumeMounts")
    check_admitted(create(plain, USER), "a Job without the curve volume")
    plain_pod = {**pod("plain", ns), "spec": plain["spec"]["template"]["spec"]}
    check_admitted(create(plain_pod, USER), "a pod without the curve volume")
    add_volume = json.dumps({"spec": {"volumes": curve_pod_spec("lab")["volumes"]}})
    r = kubectl("patch", "pod", "plain", "-n", ns, "-p", add_volume, check_rc=False)
    check(r.returncode != 0 and "pod updates may not change fields" in r.stderr,
          f"adding the curve volume to a pod: {r.stdout} {r.stderr}")
    r = kubectl("patch", "job", "plain", "-n", ns, "-p",
                json.dumps({"spec": {"template": json.loads(add_volume)}}), check_rc=False)
    check(r.returncode != 0 and "field is immutable" in r.stderr,
          f"adding the curve volume to a Job's template: {r.stdout} {r.stderr}")

    # 4. The controller, as deployed, under both policies.
    create_namespace(CONTROLLER_NS)
    kubectl("apply", "-f", os.path.join(REPO, "deploy", "controller", "rbac.yaml"))
    kubeconfig = service_account_kubeconfig(work, CONTROLLER_SA, CONTROLLER_NS)
    ctl = Controller(work, "vap", kubeconfig=kubeconfig)
    ctl.wait_ready()
    apply(minicluster("lab", ns, size=2))
    mc = wait_for("MiniCluster lab's uid", lambda: get("minicluster", "lab", ns)["metadata"].get("uid"))
    lab = wait_for("the controller's Job lab", lambda: get("job", "lab", ns))
    pods = wait_for("two pods of Job lab, created by the Job controller",
                    lambda: len(job_pods(ns, "lab")) == 2 and job_pods(ns, "lab"), timeout=60)
    for p in pods:
        name = p["metadata"]["name"]
        check_eq([v["csi"]["volumeAttributes"] for v in p["spec"]["volumes"] if "csi" in v],
                 [{"minicluster": "lab", "generation": mc, "owner": "0"}], f"pod {name} curve volume")
        check_eq([(r["kind"], r["name"], r.get("controller")) for r in p["metadata"]["ownerReferences"]],
                 [("Job", "lab", True)], f"pod {name} ownerReferences")
    got = events(ns, "Job", "lab")
    check_eq([m for r, m in got if r == "FailedCreate"], [], "FailedCreate events of Job lab")
    check_eq(sum(1 for r, _ in got if r == "SuccessfulCreate"), 2, "SuccessfulCreate events of Job lab")
    bad = [ln for ln in ctl.text().splitlines() if "ValidatingAdmissionPolicy" in ln or "HTTP 403" in ln]
    check_eq(bad, [], "refusals in the controller log")
    check(lab["spec"]["template"]["spec"]["volumes"], "Job lab has no volumes")
    log(f"kubectl get pods -n {ns}:\n" + kubectl("get", "pods", "-n", ns).stdout.rstrip())


if __name__ == "__main__":
    main([test_job_controller_identity, test_policy])
