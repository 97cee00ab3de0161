#!/usr/bin/env python3
"""Every command the user guide (docs/user/*.md) gives runs, as a user
with the suggested roles (examples/rbac/minicluster-user.yaml), on the real
API server.

The roles are bound in one namespace to a group; each ```sh block of the
guide runs in bash (from the repo root, `<placeholders>` filled in) with
KUBECONFIG acting as a member of that group (the kubeconfig's `as` and
`as-groups`: the API server impersonates, so authorization is the user's).
Every kubectl call is recorded with what it printed on stderr; a call that
was forbidden, or that kubectl or the API server could not parse (an unknown
command, flag or resource type, a missing file, a short name two kinds
share), fails the test. A call that found no such object is fine: nothing
runs here but the controller (no node, no Kueue manager; Kueue's CRDs are
installed so its resources exist). `helm` lines are parsed by helm itself
(`--help` added, so nothing is installed); a script line must name an
executable file of the repo.

A self-test runs commands that must fail the same checks: reading Secrets,
listing MiniClusters of every namespace, and exec without the exec role.

  test/e2e/user_guide_test.py
"""

import glob
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_lib import (REPO, Controller, apply, check, create_namespace, get, items,  # noqa: E402
                     kubectl, log, main, minicluster, wait_for)

GUIDE = sorted(glob.glob(os.path.join(REPO, "docs", "user", "*.md")))
ROLES = os.path.join(REPO, "examples", "rbac", "minicluster-user.yaml")
NAMESPACE = "default"  # where the guide's examples create their MiniClusters
GROUP = "team-a"
EXAMPLE = "hello"  # examples/minicluster-ephemeral.yaml

# What kubectl, the API server or bash print when a command is refused or
# does not parse.
REFUSED = re.compile("|".join([
    r"[Ff]orbidden", r"unknown (shorthand )?flag", r"unknown command",
    r"doesn't have a resource type", r"no matches for kind", r"the path .* does not exist",
    r"is ambiguous", r"invalid argument", r"flag needs an argument", r"required flag",
    r"strict decoding error", r"unknown field", r"error: unknown", r"syntax error",
    r"must specify", r"Error: accepts", r"error validating",
]))

# Each call: its exit code, arguments and stderr, in a file of its own
# (command substitutions run in subshells).
PREAMBLE = r'''
kubectl() {
  local rec; rec=$(mktemp "$FCC_CALLS/call.XXXXXX")
  printf '%s\n' "kubectl $*" >"$rec.cmd"
  timeout 20 "$FCC_KUBECTL" "$@" 2>"$rec.err"; local rc=$?
  echo "$rc" >"$rec.rc"; cat "$rec.err" >&2; return $rc
}
helm() {
  local rec; rec=$(mktemp "$FCC_CALLS/call.XXXXXX")
  printf '%s\n' "helm $*" >"$rec.cmd"
  "$FCC_HELM" "$@" --help >/dev/null 2>"$rec.err"; local rc=$?
  echo "$rc" >"$rec.rc"; return $rc
}
'''


def blocks(path):
    """(line, commands) of each ```sh block of a page, and of the `$ ` lines
    of each ```console block (a transcript: its other lines are output)."""
    with open(path) as f:
        text = f.read()
    found = []
    for m in re.finditer(r"^```(sh|bash|shell|console)\n(.*?)^```", text, re.S | re.M):
        body = m.group(2)
        if m.group(1) == "console":
            body = "".join(ln[2:] + "\n" for ln in body.splitlines() if ln.startswith("$ "))
        if body.strip():
            found.append((text.count("\n", 0, m.start()) + 2, body))
    return found


def fill(block, names):
    """The block with its placeholders (`<pod>`, NS, NAME) filled in."""
    def one(m):
        key = m.group(1) or m.group(2).lower()
        for pattern, value in names.items():
            if re.search(pattern, key):
                return value
        return "placeholder"
    return re.sub(r"<([a-z][a-z0-9_ -]*)>|\b(NS|NAME|POD)\b", one, block)


def script_lines(block):
    """Script paths a block runs (first word of a line), continuations joined."""
    lines = re.sub(r"\\\n", " ", block).splitlines()
    return [ln.split()[0] for ln in lines if re.match(r"\s*(\./)?scripts/", ln)]


def run_block(block, env, where):
    """Runs one block; returns [(where, command, stderr)] of refused calls and
    the number of calls."""
    calls = tempfile.mkdtemp(prefix="calls.", dir=env["FCC_WORK"])
    r = subprocess.run(["bash", "-c", PREAMBLE + block], cwd=REPO, capture_output=True,
                       text=True, timeout=600, env={**env, "FCC_CALLS": calls})
    refused = []
    if REFUSED.search(r.stderr) and not os.listdir(calls):
        refused.append((where, "(bash)", r.stderr))
    n = 0
    for cmd_file in sorted(glob.glob(os.path.join(calls, "*.cmd"))):
        n += 1
        base = cmd_file[:-4]
        with open(cmd_file) as f:
            cmd = f.read().strip()
        with open(base + ".err", errors="replace") as f:
            err = f.read()
        if REFUSED.search(err):
            refused.append((where, cmd, err.strip()))
    for script in script_lines(block):
        path = os.path.join(REPO, script.lstrip("./"))
        if not os.access(path, os.X_OK):
            refused.append((where, script, "no such executable in the repo"))
    return refused, n


def user_kubeconfig(work, user, groups):
    """The admin kubeconfig, impersonating `user` in `groups`, namespace set."""
    out = kubectl("config", "view", "--raw", "--flatten", "-o", "json").stdout
    cfg = json.loads(out)
    for u in cfg["users"]:
        u["user"]["as"] = user
        u["user"]["as-groups"] = groups
    for c in cfg["contexts"]:
        c["context"]["namespace"] = NAMESPACE
    path = os.path.join(work, f"{user}.kubeconfig")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def kueue_crds():
    """Kueue's CRDs from the module scripts/build-kueue built, without their
    conversion webhook (no Kueue manager runs to serve it)."""
    import yaml  # python3-yaml
    r = subprocess.run([os.path.join(REPO, "scripts", "build-kueue")], capture_output=True,
                       text=True, check=True)
    bases = os.path.join(r.stdout.strip().splitlines()[-1], "config", "components", "crd", "bases")
    crds = []
    for path in sorted(glob.glob(os.path.join(bases, "*.yaml"))):
        with open(path) as f:
            crd = yaml.safe_load(f)
        crd["spec"].pop("conversion", None)
        crds.append(crd)
    kubectl("apply", "--server-side", "-f", "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": crds}), timeout=120)
    for crd in crds:
        kubectl("wait", "--for=condition=Established", f"crd/{crd['metadata']['name']}",
                "--timeout=60s", timeout=90)
    return len(crds)


def setup(work):
    log(f"Kueue CRDs: {kueue_crds()}")
    kubectl("apply", "-f", ROLES)
    create_namespace(NAMESPACE)
    kubectl("-n", NAMESPACE, "create", "rolebinding", "minicluster-users",
            "--clusterrole=minicluster-user", f"--group={GROUP}")
    kubectl("-n", NAMESPACE, "create", "rolebinding", "minicluster-users-exec",
            "--clusterrole=minicluster-user-exec", f"--group={GROUP}")
    Controller(work, "main").wait_ready()


def environment(work, user, groups):
    helm = subprocess.run([os.path.join(REPO, "scripts", "build-helm")], capture_output=True,
                          text=True, check=True).stdout.strip()
    kubectl_bin = subprocess.run(["bash", "-c", "command -v kubectl"], capture_output=True,
                                 text=True, check=True).stdout.strip()
    return {**os.environ, "KUBECONFIG": user_kubeconfig(work, user, groups),
            "FCC_KUBECTL": kubectl_bin, "FCC_HELM": helm, "FCC_WORK": work}


def placeholders():
    """What `<...>` stands for: the example MiniCluster and, once the Job
    controller made it, its lead broker pod."""
    pods = items("pods", NAMESPACE, f"minicluster.dev/name={EXAMPLE},"
                 "batch.kubernetes.io/job-completion-index=0")
    pod = pods[0]["metadata"]["name"] if pods else f"{EXAMPLE}-0"
    return {r"pod": pod, r"namespace|^ns$": NAMESPACE, r"name|minicluster": EXAMPLE,
            r"job": EXAMPLE}


def test_user_guide_commands(work):
    check(GUIDE, "no user guide pages in docs/user/")
    env = environment(work, "alice", [GROUP])
    # The guide's MiniClusters exist (`hello`, and `lab` in its
    # troubleshooting), so commands about them find them.
    kubectl("apply", "-f", os.path.join(REPO, "examples", "minicluster-ephemeral.yaml"))
    apply(minicluster("lab", NAMESPACE))
    for name in (EXAMPLE, "lab"):
        wait_for(f"{name}'s Job and pods", lambda: items(
            "pods", NAMESPACE, f"minicluster.dev/name={name}"), timeout=60)
    refused, calls, nblocks = [], 0, 0
    for page in GUIDE:
        for line, block in blocks(page):
            nblocks += 1
            where = f"{os.path.relpath(page, REPO)}:{line}"
            bad, n = run_block(fill(block, placeholders()), env, where)
            refused += bad
            calls += n
            if get("miniclusters.minicluster.dev", EXAMPLE, NAMESPACE) is None:
                # The guide deleted it: later pages read it again.
                kubectl("apply", "-f", os.path.join(REPO, "examples",
                                                    "minicluster-ephemeral.yaml"))
    log(f"{len(GUIDE)} pages, {nblocks} sh blocks, {calls} kubectl/helm calls as alice")
    check(calls > 0, "the user guide runs no kubectl command")
    check(not refused, "user guide commands refused or not parsed:\n" + "\n".join(
        f"  {where}: {cmd}\n    {err}" for where, cmd, err in refused))


def test_refusals_are_seen(work):
    """The checks above can fail: what the roles do not grant is caught."""
    env = environment(work, "bob", [])
    kubectl("-n", NAMESPACE, "create", "rolebinding", "bob-user",
            "--clusterrole=minicluster-user", "--user=bob")
    for cmd in ("kubectl get secrets",
                "kubectl get miniclusters.minicluster.dev -A",
                f"kubectl exec {placeholders()['pod']} -- true",
                "kubectl get minicluster.dev.nosuchkind",
                "kubectl logs --no-such-flag x",
                "scripts/no-such-script"):
        bad, _ = run_block(cmd, env, "self-test")
        check(bad, f"not refused as bob: {cmd}")


if __name__ == "__main__":
    main([test_user_guide_commands, test_refusals_are_seen], setup=setup)
