#!/usr/bin/env python3
"""minicluster-controller end to end on a real control plane (issue 5, item 2).

The real controller binary against etcd + kube-apiserver +
kube-controller-manager on loopback: the CRD is applied, MiniClusters are
created, and the Service, Job and pods are checked as the API server stored
them. The real Job controller creates the pods; this test plays the kubelet
through pods/status. The real garbage collector deletes Jobs and Services.

  test/e2e/controller_e2e_test.py [TEST...]   (FCC_CONTROLLER=path/to/binary)
"""

import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_lib import (API, REPO, Controller, Watcher, apply, check, check_eq, cond_true,  # noqa: E402
                     condition, create_namespace, get, items, job_pods, kubectl, log, main,
                     minicluster, patch, poke_and_wait_reconciled, pod_index, set_pod_status,
                     wait_first_pass, wait_for, wait_reconciled)

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
NAME_LABEL = "minicluster.dev/name"
ORDER = ["Pending", "Queued", "Running", "Succeeded", "Failed"]


def state(ns, name):
    mc = get("miniclusters.minicluster.dev", name, ns)
    return (mc or {}).get("status", {}).get("state")


def wait_state(ns, name, want, timeout=60):
    return wait_for(f"MiniCluster {ns}/{name} state {want}",
                    lambda: state(ns, name) == want and get("miniclusters.minicluster.dev", name, ns), timeout)


def check_owned(obj, mc, what):
    check_eq(obj["metadata"].get("ownerReferences"),
             [{"apiVersion": API, "kind": "MiniCluster", "name": mc["metadata"]["name"],
               "uid": mc["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}],
             f"{what} ownerReferences")


def check_service(svc, mc):
    name = mc["metadata"]["name"]
    check_owned(svc, mc, f"Service {name}")
    spec = svc["spec"]
    check_eq(spec.get("clusterIP"), "None", "Service clusterIP")
    check_eq(spec.get("publishNotReadyAddresses"), True, "Service publishNotReadyAddresses")
    check_eq(spec.get("selector"), {NAME_LABEL: name}, "Service selector")
    check_eq([p["port"] for p in spec.get("ports", [])], [mc["spec"]["brokerPort"]],
             "Service ports")


def check_network_policy(np, mc):
    """Ingress to the brokers: their port from their own pods only, every
    other TCP and UDP port from anywhere."""
    name, port = mc["metadata"]["name"], mc["spec"]["brokerPort"]
    check_owned(np, mc, f"NetworkPolicy {name}")
    brokers = {"matchLabels": {NAME_LABEL: name}}
    spec = np["spec"]
    check_eq(spec.get("podSelector"), brokers, "NetworkPolicy podSelector")
    check_eq(spec.get("policyTypes"), ["Ingress"], "NetworkPolicy policyTypes")
    check_eq(spec.get("ingress"), [
        {"from": [{"podSelector": brokers}], "ports": [{"protocol": "TCP", "port": port}]},
        {"ports": [{"protocol": "TCP", "port": 1, "endPort": port - 1},
                   {"protocol": "TCP", "port": port + 1, "endPort": 65535},
                   {"protocol": "UDP", "port": 1, "endPort": 65535}]}],
        "NetworkPolicy ingress")


def check_job(job, mc, owner_attr):
    name, size = mc["metadata"]["name"], mc["spec"]["size"]
    check_owned(job, mc, f"Job {name}")
    check_eq(job["metadata"]["labels"].get(NAME_LABEL), name, "Job name label")
    spec = job["spec"]
    check_eq((spec.get("completions"), spec.get("parallelism")), (size, size),
             "Job completions, parallelism")
    check_eq(spec.get("completionMode"), "Indexed", "Job completionMode")
    check_eq(spec.get("successPolicy"), {"rules": [{"succeededIndexes": "0"}]},
             "Job successPolicy")
    check_eq((spec.get("backoffLimitPerIndex"), spec.get("maxFailedIndexes")),
             (mc["spec"].get("brokerRestarts", 3), 0), "Job backoffLimitPerIndex, maxFailedIndexes")
    check_eq([r["action"] for r in spec.get("podFailurePolicy", {}).get("rules", [])],
             ["FailIndex", "Ignore", "Count", "FailIndex"], "Job podFailurePolicy actions")
    pod = spec["template"]["spec"]
    check_eq(pod.get("subdomain"), name, "pod subdomain")
    check_eq(pod.get("restartPolicy"), "Never", "pod restartPolicy")
    csi = [v for v in pod.get("volumes", []) if "csi" in v]
    check_eq(len(csi), 2, "number of CSI volumes (the cert and the Flux view)")
    check_eq(csi[1]["csi"], {"driver": "curve.minicluster.dev", "readOnly": True,
                             "volumeAttributes": {"view": "flux-core-0.88.0"}}, "view volume")
    check_eq(csi[0]["csi"], {"driver": "curve.minicluster.dev", "readOnly": True,
                             "volumeAttributes": {"minicluster": name,
                                                  "generation": mc["metadata"]["uid"],
                                                  "owner": owner_attr}},
             "CSI volume")
    mounts = pod["containers"][0].get("volumeMounts", [])
    check(any(m["name"] == csi[0]["name"] for m in mounts), f"CSI volume not mounted: {mounts}")
    want_queue = mc["metadata"].get("labels", {}).get(QUEUE_LABEL)
    check_eq(job["metadata"]["labels"].get(QUEUE_LABEL), want_queue, "Job queue label")


def managers(obj):
    """{manager: [operation, fields]} from metadata.managedFields."""
    return {m["manager"]: (m["operation"], m.get("fieldsV1", {}))
            for m in obj["metadata"].get("managedFields", [])}


def job_spec_suspend(ns, name):
    job = get("job", name, ns)
    return None if job is None else job["spec"].get("suspend")


def states_seen(watcher, name):
    """The MiniCluster's status.state values in the order the API server sent them."""
    seen = []
    for e in watcher.of(name):
        s = e["object"].get("status", {}).get("state")
        if s and (not seen or seen[-1] != s):
            seen.append(s)
    return seen


def mc_events(ns, name):
    """events.k8s.io/v1 Events about MiniCluster `name`, oldest first."""
    out = kubectl("get", "events.events.k8s.io", "-n", ns, "-o", "json",
                  f"--field-selector=regarding.name={name},regarding.kind=MiniCluster").stdout
    evs = json.loads(out)["items"]
    for e in evs:
        check_eq(e.get("reportingController"), "minicluster.dev/minicluster-controller",
                 f"reportingController of event {e['metadata']['name']}")
        check(e.get("reportingInstance") and e.get("action") and e.get("eventTime"),
              f"event without reportingInstance, action or eventTime: {e}")
        check_eq(e["regarding"].get("apiVersion"), API, "event regarding.apiVersion")
    return sorted(evs, key=lambda e: e["eventTime"])


def reasons(ns, name):
    return [e["reason"] for e in mc_events(ns, name)]


def wait_reasons(ns, name, want, timeout=30):
    """Waits until the MiniCluster's event reasons are exactly `want`."""
    wait_for(f"events {want} on {ns}/{name}", lambda: reasons(ns, name) == want, timeout)


def scrape(ctl):
    """{series: value} from the controller's /metrics."""
    return ctl.metrics()


def test_lifecycle(work):
    """Ephemeral, persistent, queued and held (spec.suspend) MiniClusters
    from creation to Succeeded/Failed and garbage collection."""
    ns = "e2e"
    create_namespace(ns)
    jobs_w = Watcher("jobs", ns, work)
    mcs_w = Watcher("miniclusters", ns, work)
    ctl = Controller(work, "lifecycle")
    ctl.wait_ready()
    try:
        specs = {
            "eph": (minicluster("eph", ns, size=3, command=["flux", "run", "-N3", "hostname"],
                                fluxUser={"uid": 1000, "gid": 1000},
                                resources={"limits": {"cpu": "1500m"}}), "1000:1000"),
            "pers": (minicluster("pers", ns, size=2, brokerPort=9000), "0"),
            "queued": (minicluster("queued", ns, size=2, command=["true"],
                                   labels={QUEUE_LABEL: "user-queue"},
                                   fluxUser={"uid": 500}), "500"),
            "held": (minicluster("held", ns, size=2, suspend=True,
                                 resources={"requests": {"cpu": "1"}}), "0"),
        }
        for name, (obj, _) in specs.items():
            apply(obj)

        # Objects as stored: every Job was created suspended, and is shaped
        # as the design says; Services are headless; all owned.
        for name, (_, owner_attr) in specs.items():
            mc = wait_for(f"MiniCluster {name} with a uid", lambda n=name: get("miniclusters.minicluster.dev", n, ns))
            job = wait_for(f"Job {name}", lambda n=name: get("job", n, ns), timeout=30)
            check_job(job, mc, owner_attr)
            check_service(wait_for(f"Service {name}", lambda n=name: get("service", n, ns)), mc)
            check_network_policy(wait_for(f"NetworkPolicy {name}",
                                          lambda n=name: get("networkpolicy", n, ns)), mc)
            first = wait_for(f"ADDED event of Job {name}", lambda n=name: jobs_w.of(n))[0]
            check_eq(first["type"], "ADDED", f"first watch event of Job {name}")
            check_eq(first["object"]["spec"].get("suspend"), True, f"Job {name} suspend at creation")
        log("Jobs, Services and NetworkPolicies stored as designed; every Job created suspended")

        # Unqueued Jobs are unsuspended by the controller; queued and held stay suspended.
        for name in ("eph", "pers"):
            wait_for(f"Job {name} unsuspended", lambda n=name: job_spec_suspend(ns, n) is False)
            wait_state(ns, name, "Running")
        # Each reconciled since: a controller that would unsuspend them has.
        for name in ("queued", "held"):
            poke_and_wait_reconciled(ctl.metrics_url, "job", name, ns)
        for name, reason in (("queued", "WaitingForKueue"), ("held", "Suspended")):
            check_eq(job_spec_suspend(ns, name), True, f"Job {name} suspend")
            mc = wait_state(ns, name, "Queued")
            check_eq(condition(mc, "Queued")["reason"], reason, f"{name} Queued reason")
            check_eq(job_pods(ns, name), [], f"pods of suspended Job {name}")
        # Field ownership: only unqueued Jobs have a launcher-owned suspend.
        queued_job = get("job", "queued", ns, managed_fields=True)
        check("minicluster-controller-launcher" not in managers(queued_job),
              f"the controller wrote suspend of a queued Job: {list(managers(queued_job))}")
        eph_mgr = managers(get("job", "eph", ns, managed_fields=True))
        check_eq(eph_mgr.get("minicluster-controller-launcher", ("", {}))[0], "Apply",
                 "launcher field manager of Job eph")
        check("f:suspend" in eph_mgr["minicluster-controller-launcher"][1].get("f:spec", {}),
              "launcher does not own spec.suspend of Job eph")
        check_eq(eph_mgr.get("minicluster-controller-create", ("",))[0], "Update",
                 "create field manager of Job eph")
        log("unqueued Jobs unsuspended; queued and spec.suspend Jobs stay suspended")

        # The real Job controller creates one pod per index, hostname <name>-<index>.
        pods = wait_for("3 pods of Job eph", lambda: len(job_pods(ns, "eph")) == 3 and job_pods(ns, "eph"))
        check_eq(sorted(pod_index(p) for p in pods), [0, 1, 2], "pod indexes of eph")
        for p in pods:
            check_eq((p["spec"].get("hostname"), p["spec"].get("subdomain")),
                     (f"eph-{pod_index(p)}", "eph"), "pod hostname, subdomain")
        for p in pods:  # a kubelet starts them
            set_pod_status(ns, p["metadata"]["name"], "Running", ready=True)
        mc = wait_for("eph Running with 3 ready", lambda: "3 ready" in (
            condition(get("miniclusters.minicluster.dev", "eph", ns), "Running") or {}).get("message", "")
            and get("miniclusters.minicluster.dev", "eph", ns))
        check_eq(condition(mc, "Running")["message"], "3 of 3 broker pods active, 3 ready",
                 "Running message")

        # Rank 0 exits 0: Job succeeds through successPolicy, the rest are terminated.
        pod0 = next(p for p in pods if pod_index(p) == 0)
        set_pod_status(ns, pod0["metadata"]["name"], "Succeeded", exit_code=0)
        wait_for("Job eph SuccessCriteriaMet", lambda: cond_true(get("job", "eph", ns), "SuccessCriteriaMet"))
        wait_for("Job eph Complete", lambda: cond_true(get("job", "eph", ns), "Complete"))
        wait_for("pods of indexes 1, 2 of eph deleted",
                 lambda: [pod_index(p) for p in job_pods(ns, "eph")] == [0])
        mc = wait_state(ns, "eph", "Succeeded")
        for t in ("Queued", "Running", "Succeeded", "Failed"):
            check_eq(condition(mc, t)["status"], "True" if t == "Succeeded" else "False",
                     f"eph condition {t}")
            check_eq(condition(mc, t)["observedGeneration"], 1, f"eph {t} observedGeneration")
        check_eq(mc["status"].get("jobName"), "eph", "eph status.jobName")
        check_eq(mc["status"].get("fluxResources"), {"source": "pod", "cores": 2, "gpus": 0},
                 "eph status.fluxResources (limits.cpu 1500m, rounded up)")
        seen = states_seen(mcs_w, "eph")
        check_eq([s for s in seen if s != "Pending"], ["Queued", "Running", "Succeeded"],
                 "eph states as watched")
        log(f"eph: states {seen}; Job Complete through successPolicy; other pods terminated")

        # A follower of the persistent one says "replace me" (75): the Job
        # controller makes a new pod of index 1 (after its 10 s back-off).
        # So does its lead (a persistent lead's pod is replaced too): the
        # new pod carries the index's failure count, and the MiniCluster says
        # its queue was lost (no spec.flux.state). Then the lead says "lost"
        # (76, an ephemeral lead's code): podFailurePolicy fails the Job.
        pods = wait_for("2 pods of Job pers", lambda: len(job_pods(ns, "pers")) == 2 and job_pods(ns, "pers"))
        pod1 = next(p for p in pods if pod_index(p) == 1)
        set_pod_status(ns, pod1["metadata"]["name"], "Failed", exit_code=75)
        wait_for("a new pod of index 1", lambda: [
            p for p in job_pods(ns, "pers") if pod_index(p) == 1
            and p["metadata"]["uid"] != pod1["metadata"]["uid"]], timeout=60)
        check_eq(state(ns, "pers"), "Running", "pers after a follower was replaced")
        pod0 = next(p for p in pods if pod_index(p) == 0)
        set_pod_status(ns, pod0["metadata"]["name"], "Failed", exit_code=75)
        pod0 = wait_for("a new pod of index 0", lambda: next((
            p for p in job_pods(ns, "pers") if pod_index(p) == 0
            and p["metadata"]["uid"] != pod0["metadata"]["uid"]), None), timeout=60)
        mc = wait_for("pers LeadReplaced", lambda: (lambda m: m if condition(
            m, "LeadReplaced") else None)(get("miniclusters.minicluster.dev", "pers", ns)))
        check_eq(condition(mc, "LeadReplaced")["reason"], "QueueLost", "pers LeadReplaced reason")
        check_eq(mc["status"]["state"], "Running", "pers after its lead was replaced")
        set_pod_status(ns, pod0["metadata"]["name"], "Failed", exit_code=76)
        wait_for("Job pers Failed", lambda: cond_true(get("job", "pers", ns), "Failed"))
        mc = wait_state(ns, "pers", "Failed")
        check_eq(condition(mc, "Failed")["reason"], "LeadBrokerLost", "pers Failed reason")
        log("pers: a follower replaced, the lead replaced (LeadReplaced: QueueLost), then the "
            "lead lost -> Failed (LeadBrokerLost)")

        # spec.suspend toggles the held Job (unqueued: the controller owns suspend).
        patch("minicluster", "held", ns, {"spec": {"suspend": False}})
        wait_for("Job held unsuspended", lambda: job_spec_suspend(ns, "held") is False)
        wait_state(ns, "held", "Running")
        wait_for("2 pods of held", lambda: len(job_pods(ns, "held")) == 2)
        patch("minicluster", "held", ns, {"spec": {"suspend": True}})
        wait_for("Job held suspended again", lambda: job_spec_suspend(ns, "held") is True)
        mc = wait_state(ns, "held", "Queued")
        check_eq(condition(mc, "Queued")["observedGeneration"], 3, "held observedGeneration")
        wait_for("pods of held deleted after suspend", lambda: job_pods(ns, "held") == [])
        log("held: spec.suspend false -> Running, true -> Queued (pods deleted)")

        # One event per state change, none per reconcile.
        wait_reasons(ns, "eph", ["Queued", "Started", "Completed"])
        # pers has no CPU request: Flux would schedule the node's hwloc view.
        wait_reasons(ns, "pers", ["Queued", "Started", "NoResourceRequest", "QueueLost", "Failed"])
        wait_reasons(ns, "queued", ["Queued"])
        wait_reasons(ns, "held", ["Queued", "Started", "Suspended"])
        failed = mc_events(ns, "pers")[-1]
        check_eq(failed["type"], "Warning", "type of event Failed")
        check(failed["note"].startswith(condition(get("miniclusters.minicluster.dev", "pers", ns), "Failed")["reason"]),
              f"event Failed note: {failed['note']!r}")
        check_eq(mc_events(ns, "eph")[-1]["regarding"]["uid"],
                 get("miniclusters.minicluster.dev", "eph", ns)["metadata"]["uid"], "event regarding.uid")
        log("events: eph Queued, Started, Completed; pers ... QueueLost, Failed; held ... Suspended")

        # Level-triggered and idempotent: events that change nothing the
        # controller cares about (annotations) cause no writes, though the
        # server defaulted fields in what it stored.
        before = len(ctl.actions())
        for name in specs:
            for kind in ("minicluster", "job", "service"):
                poke_and_wait_reconciled(ctl.metrics_url, kind, name, ns)
        check_eq(ctl.actions()[before:], [], "writes after no-op changes")
        log(f"no writes after 12 no-op changes ({before} writes in total)")
        # A restarted controller finds everything as it wants it.
        check_eq(ctl.kill(), 0, "controller exit code on SIGTERM")
        ctl = Controller(work, "lifecycle-restarted")
        ctl.wait_ready()
        wait_first_pass(ctl.metrics_url, "the restarted controller's first pass")
        check_eq(ctl.actions(), [], "writes by a restarted controller")
        check_eq(reasons(ns, "eph"), ["Queued", "Started", "Completed"],
                 "eph events after a controller restart")

        # Deleting a MiniCluster garbage-collects its Job, Service, NetworkPolicy and pods.
        for name in specs:
            uid = get("job", name, ns)["metadata"]["uid"]
            kubectl("delete", "miniclusters.minicluster.dev", name, "-n", ns, "--wait=true", "--timeout=60s",
                    timeout=90)
            wait_for(f"Job, Service and NetworkPolicy {name} garbage-collected",
                     lambda n=name: get("job", n, ns) is None and get("service", n, ns) is None
                     and get("networkpolicy", n, ns) is None, timeout=90)
            wait_for(f"pods of Job {name} garbage-collected",
                     lambda u=uid: items("pods", ns, f"batch.kubernetes.io/controller-uid={u}") == [],
                     timeout=90)
        log("deleted MiniClusters: Jobs, Services, NetworkPolicies and pods garbage-collected")
        check(ctl.alive(), "controller exited")
        check_eq([line for line in ctl.text().splitlines() if " error " in line], [],
                 "controller errors")
    finally:
        jobs_w.stop()
        mcs_w.stop()


# Every pod template field of a MiniCluster (docs/reference/spec.md, "Pod template fields").
POD_FIELDS = {
    "podLabels": {"team": "physics"},
    "podAnnotations": {"example.com/cost-center": "hpc-42"},
    "nodeSelector": {"disk": "ssd"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "hpc",
                     "effect": "NoSchedule"}],
    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                            "labelSelector": {"matchLabels": {"team": "physics"}}}}]}},
    "serviceAccountName": "flux-runner",
    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "lammps-data"}},
                {"name": "scratch", "emptyDir": {}}],
    "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True},
                     {"name": "scratch", "mountPath": "/scratch"}],
}
# What Kueue's admission adds from a ResourceFlavor (pkg/podset Merge).
FLAVOR_LABEL = {"cloud.example.com/flavor": "spot"}
FLAVOR_TOLERATION = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}


def check_pod_fields(pod, name, what):
    """`pod`: a pod template or a pod of MiniCluster `name`; its fields are in it."""
    meta, spec = pod["metadata"], pod["spec"]
    check_eq(meta["labels"].get("team"), "physics", f"{what} label team")
    check_eq(meta["labels"].get(NAME_LABEL), name, f"{what} {NAME_LABEL}")
    check_eq(meta.get("annotations", {}).get("example.com/cost-center"), "hpc-42",
             f"{what} annotation")
    check_eq(spec.get("nodeSelector", {}).get("disk"), "ssd", f"{what} nodeSelector")
    check(POD_FIELDS["tolerations"][0] in spec.get("tolerations", []),
          f"{what} tolerations: {spec.get('tolerations')}")
    check_eq(spec.get("affinity"), POD_FIELDS["affinity"], f"{what} affinity")
    check_eq(spec.get("serviceAccountName"), "flux-runner", f"{what} serviceAccountName")
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    check_eq(volumes.get("data"), POD_FIELDS["volumes"][0], f"{what} PVC volume")
    check_eq(volumes.get("scratch"), POD_FIELDS["volumes"][1], f"{what} emptyDir volume")
    check("curve" in volumes, f"{what}: the CSI volume is gone: {sorted(volumes)}")
    mounts = spec["containers"][0].get("volumeMounts", [])
    for want in POD_FIELDS["volumeMounts"]:
        check(want in mounts, f"{what}: mount {want} missing: {mounts}")


def owns_template_field(obj, manager, *path):
    """True if field manager `manager` owns spec.template.spec.<path...>."""
    fields = managers(obj).get(manager, ("", {}))[1]
    node = fields.get("f:spec", {}).get("f:template", {}).get("f:spec", {})
    for key in path:
        node = node.get(key)
        if node is None:
            return False
    return True


def admit_like_kueue(ns, name):
    """What Kueue's batch/Job integration does at admission (an update of the
    suspended Job, by another field manager): the flavor's nodeSelector and
    tolerations merged into the template, a label added, suspend false."""
    job = get("job", name, ns)
    pod = job["spec"]["template"]
    body = {"spec": {"suspend": False, "template": {
        "metadata": {"labels": {"kueue.x-k8s.io/podset": "main"}},
        "spec": {"nodeSelector": {**pod["spec"].get("nodeSelector", {}), **FLAVOR_LABEL},
                 "tolerations": pod["spec"].get("tolerations", []) + [FLAVOR_TOLERATION]}}}}
    kubectl("patch", "job", name, "-n", ns, "--type=merge", "--field-manager=kueue-e2e",
            "-p", json.dumps(body))


def test_pod_fields(work):
    """Every pod template field reaches the Job's pod template and the Job
    controller's pods; what Kueue merges into a queued Job's template at
    admission is never undone; the CRD refuses overriding the controller's
    names with a message that says which and why."""
    ns = "e2e-pod"
    create_namespace(ns)
    kubectl("create", "serviceaccount", "flux-runner", "-n", ns)
    kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "lammps-data", "namespace": ns},
        "spec": {"accessModes": ["ReadOnlyMany"], "resources": {"requests": {"storage": "1Gi"}}}}))
    ctl = Controller(work, "pod-fields")
    ctl.wait_ready()

    # Unqueued: the Job's template as stored, then the pods the Job
    # controller made from it (the ServiceAccount admission found flux-runner).
    apply(minicluster("podf", ns, size=2, command=["true"], **POD_FIELDS))
    job = wait_for("Job podf", lambda: get("job", "podf", ns), timeout=30)
    check_pod_fields(job["spec"]["template"], "podf", "Job podf template")
    pods = wait_for("2 pods of podf", lambda: len(job_pods(ns, "podf")) == 2 and job_pods(ns, "podf"))
    for p in pods:
        check_pod_fields(p, "podf", f"pod {p['metadata']['name']}")
    log("every pod template field is in Job podf's template and in its 2 pods")

    # Queued: Kueue merges a flavor into the template and admits; the
    # controller writes nothing to the Job, now or after a restart.
    apply(minicluster("podq", ns, size=2, command=["true"], labels={QUEUE_LABEL: "user-queue"},
                      **POD_FIELDS))
    wait_state(ns, "podq", "Queued")
    before = len(ctl.actions())
    admit_like_kueue(ns, "podq")
    wait_state(ns, "podq", "Running")
    wait_for("2 pods of podq", lambda: len(job_pods(ns, "podq")) == 2)
    poke_and_wait_reconciled(ctl.metrics_url, "job", "podq", ns)  # the admitted Job seen
    check_eq([a for a in ctl.actions()[before:] if "Job" in a], [], "Job writes after admission")
    check_eq(ctl.kill(), 0, "controller exit code on SIGTERM")
    ctl = Controller(work, "pod-fields-restarted")
    ctl.wait_ready()
    wait_first_pass(ctl.metrics_url, "the restarted controller's first pass")
    check_eq(ctl.actions(), [], "writes by a restarted controller")
    job = get("job", "podq", ns, managed_fields=True)
    pod = job["spec"]["template"]
    check_eq(pod["spec"]["nodeSelector"], {"disk": "ssd", **FLAVOR_LABEL}, "merged nodeSelector")
    check_eq(pod["spec"]["tolerations"], POD_FIELDS["tolerations"] + [FLAVOR_TOLERATION],
             "merged tolerations")
    check_eq(pod["metadata"]["labels"].get("kueue.x-k8s.io/podset"), "main", "Kueue's pod label")
    check_pod_fields(pod, "podq", "Job podq template")
    # nodeSelector and tolerations are atomic in a PodSpec: whoever changed
    # them last owns all of them; the create manager kept none.
    for field in ("f:nodeSelector", "f:tolerations"):
        check(owns_template_field(job, "kueue-e2e", field),
              f"the admission's field manager does not own {field}: {managers(job).get('kueue-e2e')}")
        for m in managers(job):
            check(not (m.startswith("minicluster-controller") and owns_template_field(job, m, field)),
                  f"{m} still owns {field} after the admission")
    # A user's later edit reaches no existing Job (copied at creation).
    before = ctl.reconciles()
    patch("minicluster", "podq", ns, {"spec": {"nodeSelector": {"disk": "nvme"}}})
    wait_reconciled(ctl.metrics_url, "the edit of podq's nodeSelector", before)
    check_eq(get("job", "podq", ns)["spec"]["template"]["spec"]["nodeSelector"],
             {"disk": "ssd", **FLAVOR_LABEL}, "nodeSelector after the MiniCluster's edit")
    check_eq([a for a in ctl.actions() if "Job" in a], [], "Job writes after the edit")
    log("podq: flavor nodeSelector + toleration merged by another manager kept; no Job write "
        "after admission, restart or an edit of spec.nodeSelector")

    # The CRD refuses the controller's names, each with its own message.
    vol = POD_FIELDS["volumes"][0]
    cases = [
        ("volume named curve", {"volumes": [{"name": "curve", "emptyDir": {}}]},
         ["spec.volumes[0]", "curve, flux-config and flux-run are the controller's volumes"]),
        ("volume named flux-run", {"volumes": [{"name": "flux-run", "emptyDir": {}}]},
         ["spec.volumes[0]", "the controller's volumes"]),
        ("a curve.minicluster.dev volume",
         {"volumes": [{"name": "cert", "csi": {"driver": "curve.minicluster.dev"}}]},
         ["spec.volumes[0]", "the controller makes the one curve.minicluster.dev volume itself"]),
        ("mount of the curve volume",
         {"volumeMounts": [{"name": "curve", "mountPath": "/cert"}]},
         ["spec.volumeMounts[0]", "already mounted"]),
        ("mount at /etc/flux/curve",
         {"volumes": [vol], "volumeMounts": [{"name": "data", "mountPath": "/etc/flux/curve"}]},
         ["spec.volumeMounts[0]", "at or under /etc/flux/curve, /etc/flux/minicluster or /run"]),
        ("mount under /run", {"volumes": [vol], "volumeMounts": [{"name": "data", "mountPath": "/run/flux"}]},
         ["spec.volumeMounts[0]", "at or under"]),
        ("mount of no volume", {"volumeMounts": [{"name": "data", "mountPath": "/data"}]},
         ["spec.volumeMounts", "every mount must name a volume of spec.volumes"]),
        ("pod label minicluster.dev/name", {"podLabels": {NAME_LABEL: "other"}},
         ["spec.podLabels", "set by the controller"]),
        ("pod label of the Job controller", {"podLabels": {"batch.kubernetes.io/job-name": "x"}},
         ["spec.podLabels", "set by the Job controller"]),
        ("pod label queue-name", {"podLabels": {QUEUE_LABEL: "q"}},
         ["spec.podLabels", "set them in metadata.labels instead"]),
        ("pod annotation minicluster.dev/", {"podAnnotations": {"minicluster.dev/x": "y"}},
         ["spec.podAnnotations", "belong to the controller"]),
        ("toleration operator", {"tolerations": [{"key": "k", "operator": "Maybe"}]},
         ["spec.tolerations[0].operator", "Unsupported value"]),
    ]
    for what, fields, want in cases:
        r = kubectl("apply", "-f", "-", input=json.dumps(minicluster("refused", ns, **fields)),
                    check_rc=False)
        check(r.returncode != 0, f"{what}: accepted by the API server")
        for text in want:
            check(text in r.stderr, f"{what}: message lacks {text!r}: {r.stderr.strip()}")
        log(f"refused {what}: {r.stderr.strip()[:160]}")
    check_eq(get("miniclusters.minicluster.dev", "refused", ns), None, "a refused MiniCluster stored")
    check(ctl.alive(), "controller exited")
    check_eq([line for line in ctl.text().splitlines() if " error " in line], [],
             "controller errors")


def test_name_taken(work):
    """A Job of the MiniCluster's name that it does not control is left
    alone and reported; once it is gone the MiniCluster gets its own."""
    ns = "e2e-taken"
    create_namespace(ns)
    kubectl("create", "job", "taken", "-n", ns, "--image=example.invalid/x")
    ctl = Controller(work, "taken")
    ctl.wait_ready()
    apply(minicluster("taken", ns, size=1))
    mc = wait_state(ns, "taken", "Pending")
    wait_for("a condition with reason JobNameTaken", lambda: any(
        c["reason"] == "JobNameTaken" for c in get("miniclusters.minicluster.dev", "taken", ns)["status"]["conditions"]))
    check_eq(get("job", "taken", ns)["metadata"].get("ownerReferences"), None,
             "foreign Job ownerReferences")
    wait_reasons(ns, "taken", ["JobNameTaken"])
    taken = mc_events(ns, "taken")[0]
    check_eq((taken["type"], taken["action"]), ("Warning", "Create"), "JobNameTaken type, action")
    wait_for("two retries", lambda: ctl.count(r"minicluster e2e-taken/taken: retrying") >= 2,
             timeout=30)
    check_eq(reasons(ns, "taken"), ["JobNameTaken"], "events after retries")
    kubectl("delete", "job", "taken", "-n", ns, "--cascade=foreground", "--wait=true", "--timeout=60s")
    mc = get("miniclusters.minicluster.dev", "taken", ns)
    job = wait_for("the MiniCluster's own Job",
                   lambda: (get("job", "taken", ns) or {}).get("metadata", {}).get("ownerReferences")
                   and get("job", "taken", ns), timeout=30)
    check_owned(job, mc, "Job taken")
    wait_state(ns, "taken", "Running")
    wait_reasons(ns, "taken", ["JobNameTaken", "Queued", "Started", "NoResourceRequest"])
    # Metrics after those reconciles: requeues while the name was taken,
    # then successes.
    m = scrape(ctl)
    total = 'controller_runtime_reconcile_total{controller="minicluster",result="%s"}'
    check(m.get(total % "success", 0) >= 1, f"no successful reconcile counted: {m.get(total % 'success')}")
    check(m.get(total % "requeue", 0) >= 2, f"requeues (JobNameTaken) counted: {m.get(total % 'requeue')}")
    check_eq(m.get(total % "requeue_after"), 0.0, "requeue_after (never used) exposed at 0")
    queue = '{controller="minicluster",name="minicluster"}'
    for series in ("workqueue_depth", "workqueue_adds_total", "workqueue_retries_total",
                   "workqueue_queue_duration_seconds_count", "workqueue_longest_running_processor_seconds"):
        check(series + queue in m, f"{series} not exposed")
    check(m["workqueue_retries_total" + queue] >= 2, "work queue retries")
    check(m['controller_runtime_reconcile_time_seconds_count{controller="minicluster"}'] >= 3,
          "reconcile time observed")
    host = os.environ["FCC_CP_APISERVER"].split("://", 1)[1]
    rest = 'rest_client_requests_total{code="%s",host="' + host + '",method="%s"}'
    check(m.get(rest % ("409", "POST"), 0) >= 2, "409 on the Job create counted")
    check(m.get(rest % ("201", "POST"), 0) >= 1, "created Service and events counted")
    check(m.get(rest % ("200", "GET"), 0) >= 1, "list/get counted")
    check(not [k for k in m if "taken" in k or ns in k], "a MiniCluster name or namespace in a label")
    log("metrics: reconciles by result, work queue, rest client requests by code")


def test_service_name_taken(work):
    """A Service of the MiniCluster's name that it does not control is never
    taken over (its selector kept, no owner added), no Job is made while it
    is there, and the MiniCluster says why; once it is gone the MiniCluster
    gets its own Service and Job."""
    ns = "e2e-svc-taken"
    create_namespace(ns)
    kubectl("create", "service", "clusterip", "svc-taken", "-n", ns, "--tcp=80")
    theirs = get("service", "svc-taken", ns)
    ctl = Controller(work, "svc-taken")
    ctl.wait_ready()
    apply(minicluster("svc-taken", ns, size=1))
    wait_for("a condition with reason ServiceNameTaken", lambda: any(
        c["reason"] == "ServiceNameTaken"
        for c in get("miniclusters.minicluster.dev", "svc-taken", ns)["status"]["conditions"]))
    # Two retries more: the Service must still be theirs.
    wait_reconciled(ctl.metrics_url, "two retries of svc-taken", ctl.reconciles(), at_least=2)
    svc = get("service", "svc-taken", ns)
    check_eq(svc["spec"].get("selector"), theirs["spec"].get("selector"), "foreign Service selector")
    check_eq(svc["metadata"].get("ownerReferences"), None, "foreign Service ownerReferences")
    check_eq(get("job", "svc-taken", ns), None, "Job made while the Service name is taken")
    check_eq(reasons(ns, "svc-taken"), ["ServiceNameTaken"], "events while the Service is in the way")
    kubectl("delete", "service", "svc-taken", "-n", ns, "--wait=true", "--timeout=60s")
    mc = get("miniclusters.minicluster.dev", "svc-taken", ns)
    svc = wait_for("the MiniCluster's own Service",
                   lambda: (get("service", "svc-taken", ns) or {}).get("metadata", {})
                   .get("ownerReferences") and get("service", "svc-taken", ns), timeout=60)
    check_service(svc, mc)
    job = wait_for("the MiniCluster's own Job", lambda: get("job", "svc-taken", ns), timeout=30)
    check_owned(job, mc, "Job svc-taken")
    check(ctl.alive(), "controller exited")


def test_invalid_spec_event(work):
    """A spec the controller refuses gives one InvalidSpec Warning event. The
    CRD refuses every such spec first, so the test loosens it (as an older
    CRD would be): without its name-length rule, a name too long for
    spec.size reaches the controller's own checks."""
    ns = "e2e-invalid"
    create_namespace(ns)
    ctl = Controller(work, "invalid")
    ctl.wait_ready()
    name = "n" * 60  # "<name>-999" is 64 characters: no valid pod hostname
    try:
        kubectl("patch", "crd", "miniclusters.minicluster.dev", "--type=json", "-p", json.dumps(
            [{"op": "remove", "path": "/spec/versions/0/schema/openAPIV3Schema/x-kubernetes-validations"}]))
        wait_for("the loosened CRD to admit the name",
                 lambda: kubectl("apply", "-f", "-", input=json.dumps(
                     minicluster(name, ns, size=1000)), check_rc=False).returncode == 0, timeout=30)
        mc = wait_state(ns, name, "Failed")
        check_eq(condition(mc, "Failed")["reason"], "InvalidSpec", "Failed reason")
        wait_reasons(ns, name, ["InvalidSpec"])
        ev = mc_events(ns, name)[0]
        check_eq((ev["type"], ev["action"]), ("Warning", "Validate"), "InvalidSpec type, action")
        check("metadata.name: too long for spec.size" in ev["note"], f"InvalidSpec note: {ev['note']!r}")
        before = ctl.reconciles()
        patch("minicluster", name, ns, {"metadata": {"annotations": {"poke": "1"}}})
        wait_reconciled(ctl.metrics_url, "the no-op change", before)
        check_eq(reasons(ns, name), ["InvalidSpec"], "events after a no-op change")
        check_eq(get("job", name, ns), None, "Job of an invalid MiniCluster")
        log("invalid spec: Failed/InvalidSpec, one Warning event naming the field")
    finally:
        kubectl("delete", "miniclusters.minicluster.dev", name, "-n", ns, "--ignore-not-found", "--wait=true")
        # Back to the CRD as shipped, for the tests after this one.
        kubectl("apply", "--server-side", "--force-conflicts", "-f",
                os.path.join(REPO, "deploy", "controller", "crd.yaml"))
        check("x-kubernetes-validations" in json.dumps(get("crd", "miniclusters.minicluster.dev")),
              "the CRD's CEL rules were not restored")


def test_deployed_rbac(work):
    """The controller as deployed: deploy/controller/rbac.yaml's least
    privilege, a ServiceAccount token (tokenFile) and the CA file, leader
    election in the kubeconfig context's namespace."""
    sa_ns, ns = "minicluster-system", "e2e-rbac"
    create_namespace(sa_ns)
    create_namespace(ns)
    kubectl("apply", "-f", os.path.join(REPO, "deploy", "controller", "rbac.yaml"))
    token = kubectl("create", "token", "minicluster-controller", "-n", sa_ns,
                    "--duration=1h").stdout.strip()
    token_file = os.path.join(work, "sa-token")
    with open(token_file, "w") as f:
        f.write(token + "\n")
    kubeconfig = os.path.join(work, "sa.kubeconfig")
    with open(kubeconfig, "w") as f:
        json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "sa",
                   "clusters": [{"name": "cp", "cluster": {
                       "server": os.environ["FCC_CP_APISERVER"],
                       "certificate-authority": os.path.join(os.environ["FCC_CP_DIR"], "pki", "ca.crt")}}],
                   "users": [{"name": "sa", "user": {"tokenFile": token_file}}],
                   "contexts": [{"name": "sa", "context": {"cluster": "cp", "user": "sa",
                                                           "namespace": sa_ns}}]}, f)
    ctl = Controller(work, "rbac", "--leader-elect", kubeconfig=kubeconfig)
    ctl.wait_ready()
    wait_for("the lease", lambda: ctl.count("acquired lease") == 1, timeout=30)
    holder = get("lease", "minicluster-controller", sa_ns)["spec"]["holderIdentity"]
    check(f"as {holder}" in ctl.text(), f"lease holder {holder} is not this controller")
    apply(minicluster("free", ns, size=1))
    apply(minicluster("waits", ns, size=1, labels={QUEUE_LABEL: "user-queue"}))
    wait_state(ns, "free", "Running")
    wait_state(ns, "waits", "Queued")
    for name in ("free", "waits"):
        check_owned(get("job", name, ns), get("miniclusters.minicluster.dev", name, ns), f"Job {name}")
        check_owned(wait_for(f"NetworkPolicy {name}", lambda n=name: get("networkpolicy", n, ns)),
                    get("miniclusters.minicluster.dev", name, ns), f"NetworkPolicy {name}")
    # spec.ttlSecondsAfterFinished: a finished MiniCluster is deleted (the
    # deployed role's delete), its Job and Service with it; others stay.
    apply(minicluster("brief", ns, size=1, command=["true"], ttlSecondsAfterFinished=2))
    pod = wait_for("the pod of brief", lambda: job_pods(ns, "brief"))[0]
    set_pod_status(ns, pod["metadata"]["name"], "Succeeded", exit_code=0)
    wait_state(ns, "brief", "Succeeded")
    t0 = time.monotonic()
    wait_for("brief deleted once its TTL ran out",
             lambda: get("miniclusters.minicluster.dev", "brief", ns) is None, timeout=30)
    log(f"brief deleted {time.monotonic() - t0:.1f}s after it was seen Succeeded (TTL 2 s)")
    wait_for("brief's Job and Service gone", lambda: get("job", "brief", ns) is None
             and get("service", "brief", ns) is None, timeout=60)
    check_eq(state(ns, "free"), "Running", "free (no TTL) after brief's deletion")
    bad = [ln for ln in ctl.text().splitlines() if "HTTP 403" in ln or "orbidden" in ln]
    check_eq(bad, [], "RBAC refusals in the controller log")


def write_atomically(path, text):
    with open(path + ".new", "w") as f:
        f.write(text)
    os.replace(path + ".new", path)  # as kubelet swaps projected files


def test_in_cluster_token_rotation(work):
    """In-cluster config (KUBERNETES_SERVICE_HOST/PORT and the files under
    /var/run/secrets/kubernetes.io/serviceaccount, mounted in a private
    mount namespace) and the token re-read on every request: after the
    token is replaced and the old one invalidated, the controller goes on."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        check(os.environ.get("FCC_REQUIRE_MOUNT_TESTS") != "1", "needs root and unshare")
        log("skipped: needs root and unshare -m")
        return
    sa_ns, ns = "minicluster-system", "e2e-incluster"
    create_namespace(sa_ns)
    create_namespace(ns)
    kubectl("apply", "-f", os.path.join(REPO, "deploy", "controller", "rbac.yaml"))

    def bound_token(anchor):
        # Bound to a Secret: deleting the Secret invalidates the token.
        kubectl("create", "secret", "generic", anchor, "-n", sa_ns)
        return kubectl("create", "token", "minicluster-controller", "-n", sa_ns, "--duration=1h",
                       "--bound-object-kind=Secret", f"--bound-object-name={anchor}").stdout.strip()

    def token_works(token):
        r = kubectl("--kubeconfig=/dev/null", f"--server={os.environ['FCC_CP_APISERVER']}",
                    f"--certificate-authority={os.environ['FCC_CP_DIR']}/pki/ca.crt",
                    f"--token={token}", "auth", "whoami", check_rc=False)
        return r.returncode == 0

    sa_dir = os.path.join(work, "serviceaccount")
    os.makedirs(sa_dir)
    shutil.copy(os.path.join(os.environ["FCC_CP_DIR"], "pki", "ca.crt"), sa_dir)
    write_atomically(os.path.join(sa_dir, "namespace"), sa_ns)
    first = bound_token("token-anchor-1")
    write_atomically(os.path.join(sa_dir, "token"), first)
    target = "/run/secrets/kubernetes.io/serviceaccount"  # /var/run -> /run
    # Private /run for the controller only; the bind mount shows later
    # changes to sa_dir (the token swap) as a projected volume would.
    script = (f"mount -t tmpfs tmpfs /run && mkdir -p {target} && "
              f"mount --bind {sa_dir} {target} && exec \"$@\"")
    port = os.environ["FCC_CP_APISERVER"].rsplit(":", 1)[1]
    ctl = Controller(work, "in-cluster", "--leader-elect", kubeconfig="",
                     wrapper=["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"],
                     env={**os.environ, "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                          "KUBERNETES_SERVICE_PORT": port})
    ctl.wait_ready()
    wait_for("the lease", lambda: ctl.count("acquired lease") == 1, timeout=30)
    apply(minicluster("one", ns, size=1))
    wait_state(ns, "one", "Running")

    second = bound_token("token-anchor-2")
    write_atomically(os.path.join(sa_dir, "token"), second)
    kubectl("delete", "secret", "token-anchor-1", "-n", sa_ns)
    wait_for("the first token to be refused", lambda: not token_works(first), timeout=30)
    check(token_works(second), "the second token does not work")
    apply(minicluster("two", ns, size=1))
    wait_state(ns, "two", "Running")
    time.sleep(3)  # a few Lease renewals with the new token
    check(ctl.alive(), f"controller exited: {ctl.tail()}")
    check(ctl.count("lost lease") == 0, "lost the lease after the token swap")
    log("in-cluster config; token replaced and the old one invalidated: still reconciling")


if __name__ == "__main__":
    main([test_lifecycle, test_pod_fields, test_name_taken, test_service_name_taken,
          test_invalid_spec_event, test_deployed_rbac, test_in_cluster_token_rotation])
