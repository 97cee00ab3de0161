"""Helpers for tests on the real node (scripts/controlplane --node): the
images it runs, the project installed from deploy/, the driver's mounts as
the node sees them, and pods with the driver's inline volume.
"""

import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from e2e_lib import (REPO, Failure, check, check_eq, get, items, kubectl,  # noqa: E402,F401
                     wait_for)

DRIVER = "curve.minicluster.dev"
NAMESPACE = "flux-curve-csi"
NODE = "fcc-node"
KUBELET_PODS = "/var/lib/kubelet/pods"
CERT = "/etc/flux/curve/curve.cert"
# In full: the flux-operator's kind is a "minicluster" too.
MINICLUSTERS = "miniclusters.minicluster.dev"
LEAD = "batch.kubernetes.io/job-completion-index=0"


def driver_binary():
    return os.environ.get("FCC_DRIVER") or os.path.join(REPO, "build", "src", "driver", "flux-curve-csi")


def image_archive(*args):
    """Builds (or finds in the cache) an image with scripts/image; its path."""
    r = subprocess.run([os.path.join(REPO, "scripts", "image"), *args],
                       stdout=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"node: scripts/image {' '.join(args)} failed")
    return r.stdout.strip().splitlines()[-1]


def node_images():
    build_dir = os.path.dirname(os.path.dirname(os.path.dirname(driver_binary())))
    return [image_archive("pause"), image_archive("driver", "--prebuilt", build_dir)]


def archive_name(archive):
    """The image name an OCI archive gives containerd on import."""
    out = subprocess.run(["tar", "-xOf", archive, "index.json"], capture_output=True, text=True, check=True)
    for m in json.loads(out.stdout)["manifests"]:
        a = m.get("annotations", {})
        name = a.get("io.containerd.image.name") or a.get("org.opencontainers.image.ref.name")
        if name:
            return name
    raise Failure(f"{archive} names no image")


def driver_image():
    """The driver image's name, as the node imported it."""
    return archive_name(os.environ["FCC_NODE_IMAGES"].split(":")[1])


# ------------------------------------------------------------------ the node

def our_mounts():
    """(target, options) of every mount of this driver on the node."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            fstype, source, super_opts = right.split()[:3]
            if fstype == "tmpfs" and source == DRIVER:
                found.append((left.split()[4], left.split()[5]))
    return found


def _in_this_nodes_container(pid):
    """Whether `pid` runs in a container of this test's node: one of its
    ancestors is a containerd shim in this test's mount namespace. Other
    tests' drivers on the same machine (the sanitizer runs' own) are not."""
    me = os.stat("/proc/self/ns/mnt").st_ino
    while pid > 1:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        if comm.startswith("containerd-shim"):
            return os.stat(f"/proc/{pid}/ns/mnt").st_ino == me
        pid = int(stat[stat.rindex(")") + 2:].split()[1])
    return False


def _processes():
    """(pid, argv) of each process on the machine, but those gone meanwhile."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                yield int(pid), f.read().split(b"\0")
        except OSError:
            continue


def driver_pids():
    """The DaemonSet's driver process(es) on this node."""
    pids = []
    for pid, argv in _processes():
        try:
            if argv[0].endswith(b"flux-curve-csi") and b"serve" in argv \
                    and _in_this_nodes_container(pid):
                pids.append(pid)
        except (OSError, ValueError):
            continue
    return pids


def this_nodes_kubelet():
    """The PID of this node's kubelet: the one in this test's network
    namespace (other node tests' kubelets run beside it)."""
    net = os.stat("/proc/self/ns/net").st_ino
    for pid, argv in _processes():
        try:
            if os.path.basename(argv[0]) == b"kubelet" and os.stat(f"/proc/{pid}/ns/net").st_ino == net:
                return pid
        except OSError:
            continue
    raise AssertionError("no kubelet process on this node")


def driver_rss_kib():
    """VmRSS of the DaemonSet's driver process(es) on the node, in KiB: the
    pod's whole footprint, as it has one container of one process."""
    rss = []
    for pid in driver_pids():
        try:
            with open(f"/proc/{pid}/status") as f:
                rss += [int(l.split()[1]) for l in f if l.startswith("VmRSS:")]
        except OSError:
            continue
    return rss


def cert_path_on_node(pod_uid, volume="curve"):
    return f"{KUBELET_PODS}/{pod_uid}/volumes/kubernetes.io~csi/{volume}/mount/curve.cert"


def mounts_of(pod_uid):
    return [m for m in our_mounts() if f"/pods/{pod_uid}/" in m[0]]


def csi_mounts():
    """Every CSI volume mounted for a pod on the node (certs and Flux views)."""
    with open("/proc/self/mountinfo") as f:
        return [line for line in f if "/volumes/kubernetes.io~csi/" in line.split()[4]]


# ------------------------------------------------------------------ pods

def minicluster_status(name, ns):
    return (get(MINICLUSTERS, name, ns) or {}).get("status", {})


def minicluster_state(name, ns):
    return minicluster_status(name, ns).get("state")


def lead_pod(name, ns):
    """The pod of the MiniCluster's lead broker (index 0), or None."""
    pods = items("pods", ns, f"minicluster.dev/name={name},{LEAD}")
    return pods[0] if pods else None


def curve_pod(name, ns, minicluster="m1", generation="g1", owner="1000:1000", attrs=None):
    volume_attrs = {"minicluster": minicluster, "generation": generation, "owner": owner}
    if attrs is not None:
        volume_attrs = attrs
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsUser": 1000, "runAsGroup": 1000},
            "containers": [{
                "name": "broker", "image": driver_image(), "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "infinity"],
                "volumeMounts": [{"name": "curve", "mountPath": os.path.dirname(CERT), "readOnly": True}],
            }],
            "volumes": [{"name": "curve", "csi": {
                "driver": DRIVER, "readOnly": True, "volumeAttributes": volume_attrs}}],
        },
    }


def pod_phase(name, ns):
    pod = get("pod", name, ns)
    return pod and pod.get("status", {}).get("phase")


def wait_running(name, ns, timeout=120):
    try:
        wait_for(f"pod {ns}/{name} Running", lambda: pod_phase(name, ns) == "Running", timeout=timeout)
    except Failure as e:
        described = kubectl("describe", "pod", name, "-n", ns, check_rc=False).stdout
        raise Failure(f"{e}\n{described[-3000:]}") from None
    return get("pod", name, ns)["metadata"]["uid"]


def delete_pod(name, ns, uid):
    kubectl("delete", "pod", name, "-n", ns, "--wait=false")
    wait_for(f"pod {ns}/{name} gone", lambda: get("pod", name, ns) is None, timeout=90)
    # kubelet unpublishes and removes the pod dir after the API object is gone.
    wait_for(f"no volume of pod {uid} left on the node",
             lambda: not mounts_of(uid) and not os.path.exists(f"{KUBELET_PODS}/{uid}"), timeout=90)


def exec_in(name, ns, *cmd):
    return kubectl("exec", "-n", ns, name, "--", *cmd, timeout=60).stdout


def expected_public(work, ns, minicluster, generation):
    key = subprocess.run(
        [driver_binary(), "cert", "--master-key-file", os.path.join(work, "master.key"),
         "--namespace", ns, "--minicluster", minicluster, "--generation", generation, "--public-only"],
        capture_output=True, text=True, check=True).stdout.strip()
    # `verify --expect-public ""` compares nothing: an empty key would pass any cert.
    check(len(key) == 40 and " " not in key, f"cert --public-only printed {key!r}, not a Z85 public key")
    return key


def check_cert_in_pod(work, name, ns, minicluster="m1", generation="g1"):
    want = expected_public(work, ns, minicluster, generation)
    out = exec_in(name, ns, "flux-curve-csi", "verify", "--expect-public", want,
                  "--expect-name", f"{ns}.{minicluster}", CERT)
    check(out.startswith("OK ") and f" public-key={want}\n" in out + "\n",
          f"verify in the pod, for public key {want}: {out}")
    check_eq(exec_in(name, ns, "stat", "-c", "%a %u %g", CERT).strip(), "400 1000 1000",
             "curve.cert mode, uid, gid")
    mount = [l for l in exec_in(name, ns, "cat", "/proc/mounts").splitlines()
             if l.split()[1] == os.path.dirname(CERT)]
    check(len(mount) == 1, f"one mount at {os.path.dirname(CERT)}: {mount}")
    fstype, options = mount[0].split()[2], mount[0].split()[3].split(",")
    check(fstype == "tmpfs" and "ro" in options, f"a read-only tmpfs: {mount[0]}")


def events_of(name, ns):
    return [e for e in items("events", ns) if e["involvedObject"].get("name") == name]


# ------------------------------------------------------------------ install

def install(work, without_admission_policy=False, overlay=None):
    """The install of docs/getting-started.md, with the image built here; with
    `without_admission_policy`, the documented opt-out (docs/admin/install.md):
    the policies admit the curve volume only in the controller's pods, and
    hand-made pods are what the driver-only tests run. `overlay`: a
    kustomization under deploy/ (e.g. multikueue/worker) applied instead of
    deploy/; the image is set where every one of them takes it from."""
    key = os.path.join(work, "master.key")
    with open(key, "wb") as f:
        f.write(os.urandom(64))
    os.chmod(key, 0o400)
    kubectl("apply", "-f", os.path.join(REPO, "deploy", "daemonset", "namespace.yaml"))
    kubectl("-n", NAMESPACE, "create", "secret", "generic", "flux-curve-csi-master-key",
            f"--from-file=master.key={key}")
    top = os.path.join(work, "deploy")
    shutil.copytree(os.path.join(REPO, "deploy"), top)
    deploy = os.path.join(top, overlay) if overlay else top
    kustomize = subprocess.run([os.path.join(REPO, "scripts", "build-kustomize")],
                               capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run([kustomize, "edit", "set", "image", f"flux-curve-csi={driver_image()}"],
                   cwd=os.path.join(top, "components", "image"), check=True)
    if without_admission_policy:
        subprocess.run([kustomize, "edit", "add", "component",
                        "components/without-admission-policy"], cwd=deploy, check=True)
    kubectl("apply", "-k", deploy)
    wait_for("the driver DaemonSet Ready on every node", daemonset_ready, timeout=180)


def daemonset_ready():
    """The driver Ready and up to date on every node of the cluster."""
    nodes = len(os.environ.get("FCC_CP_NODES", NODE).split(","))
    ds = get("daemonset", "flux-curve-csi-node", NAMESPACE)
    st = (ds or {}).get("status", {})
    return all(st.get(k) == nodes for k in ("desiredNumberScheduled", "numberReady",
                                            "updatedNumberScheduled"))


CONTROLLER_NS = "minicluster-system"


def controller_ready():
    """Both replicas of the controller's Deployment Ready."""
    status = (get("deployment", "minicluster-controller", CONTROLLER_NS) or {}).get("status", {})
    return status.get("readyReplicas") == 2


def driver_pod():
    pods = [p for p in items("pods", NAMESPACE, "app.kubernetes.io/component=node")
            if not p["metadata"].get("deletionTimestamp")]
    return pods[0] if len(pods) == 1 else None


