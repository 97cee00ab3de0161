"""Shared helpers for checking Kubernetes YAML (rendered deploy/, docs)."""

import re
import subprocess

import yaml

DRIVER_NAME = "curve.minicluster.dev"
NAMESPACE = "flux-curve-csi"
MASTER_KEY_SECRET = "flux-curve-csi-master-key"
MASTER_KEY_ITEM = "master.key"


def load_all(text):
    """All non-empty YAML documents in `text`."""
    return [d for d in yaml.safe_load_all(text) if d]


def render(kustomize, directory):
    """`kustomize build directory` as a list of objects."""
    out = subprocess.run([kustomize, "build", directory], check=True,
                         capture_output=True, text=True).stdout
    return load_all(out)


def find(objects, kind, name=None):
    return [o for o in objects
            if o.get("kind") == kind
            and (name is None or o.get("metadata", {}).get("name") == name)]


def pod_spec(obj):
    """The pod spec of a Pod or of any workload with a pod template."""
    if obj.get("kind") == "Pod":
        return obj["spec"]
    if obj.get("kind") == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    spec = obj.get("spec", {})
    # flux-operator's MiniCluster keeps its pod bits elsewhere; callers
    # handle CRs themselves.
    return spec.get("template", {}).get("spec")


def container(spec, name):
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        if c.get("name") == name:
            return c
    raise KeyError(f"no container {name!r}")


def flags(args):
    """{'--flag': value} from args like --flag=value or --flag value;
    positional words are under key None (in order)."""
    result = {None: []}
    i = 0
    while i < len(args):
        a = str(args[i])
        if a.startswith("-"):
            if "=" in a:
                k, v = a.split("=", 1)
            elif i + 1 < len(args) and not str(args[i + 1]).startswith("-"):
                k, v = a, str(args[i + 1])
                i += 1
            else:
                k, v = a, True
            result["--" + k.lstrip("-")] = v
        else:
            result[None].append(a)
        i += 1
    return result


def volume(spec, name):
    for v in spec.get("volumes", []):
        if v.get("name") == name:
            return v
    raise KeyError(f"no volume {name!r}")


def mount_for(c, path):
    """The volumeMount of container `c` holding `path`, and `path`
    relative to it (the longest matching mountPath wins)."""
    best = None
    for m in c.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/") or "/"
        if path == mp or path.startswith(mp + "/") or mp == "/":
            if best is None or len(mp) > len(best[0]):
                best = (mp, m)
    if best is None:
        raise KeyError(f"container {c['name']} mounts nothing holding {path}")
    mp, m = best
    return m, path[len(mp):].lstrip("/")


def host_path_of(spec, c, path):
    """The node's path for container path `path` via a hostPath volume."""
    m, rel = mount_for(c, path)
    v = volume(spec, m["name"])
    if "hostPath" not in v:
        raise KeyError(f"{path} in {c['name']} is not on a hostPath volume")
    base = v["hostPath"]["path"].rstrip("/")
    return f"{base}/{rel}" if rel else base


def help_flags(binary, *subcommand):
    """The long flags `binary [subcommand] --help` lists."""
    out = subprocess.run([binary, *subcommand, "--help"], check=True,
                         capture_output=True, text=True).stdout
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", out))


class Checker:
    """Collects failures so one run reports all of them."""

    def __init__(self):
        self.errors = []

    def check(self, ok, message):
        if not ok:
            self.errors.append(message)
        return ok

    def equal(self, got, want, what):
        return self.check(got == want, f"{what}: got {got!r}, want {want!r}")
