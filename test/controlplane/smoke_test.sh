#!/usr/bin/env bash
# Smoke test of the test control plane (issue 5): starts etcd,
# kube-apiserver and kube-controller-manager on loopback and proves the
# Kubernetes behaviour the MiniCluster controller relies on:
#   a suspended Indexed Job with successPolicy {succeededIndexes: "0"} creates
#   no pods; unsuspended, the real Job controller creates one pod per index;
#   when index 0 is marked Succeeded through pods/status (as a kubelet would)
#   the Job gets SuccessCriteriaMet, the other pods are terminated, then Complete.
# Also: service-account tokens are issued, the namespace controller deletes
# a namespace. Stops the control plane at the end, whatever happens.
#
#   test/controlplane/smoke_test.sh        (FCC_KEEP=1 keeps the work dir)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cp="$repo/scripts/controlplane"
work=$(mktemp -d /tmp/fcc-cp-smoke.XXXXXX)
ns=smoke
failed=0

cleanup() {
  local rc=$?
  "$cp" stop "$work" || true
  if [[ $rc -ne 0 || ${FCC_KEEP:-} == 1 ]]; then
    echo "smoke: work dir kept: $work (logs in $work/logs)" >&2
  else
    rm -rf "$work"
  fi
  if [[ $rc -eq 0 ]]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "smoke: FAIL: $*" >&2
  kubectl -n "$ns" get job,pods -o wide >&2 || true
  kubectl -n "$ns" get job smoke -o jsonpath='{.status}' >&2 || true; echo >&2
  echo "--- tail of kube-controller-manager.log" >&2
  tail -n 30 "$work/logs/kube-controller-manager.log" >&2 || true
  exit 1
}
ok() { echo "smoke: ok - $*"; }
# Predicates for wait_until.
cond() { kubectl -n "$ns" get job smoke -o jsonpath="{.status.conditions[?(@.type==\"$1\")].status}"; }
cond_is() { [[ $(cond "$1") == "$2" ]]; }
pods_are() { local out; out=$(kubectl -n "$ns" get pods -l "$2" -o name) && [[ $(grep -c . <<<"$out") -eq $1 ]]; }
gone() { ! kubectl get "$@" 2>&1 | grep -qv NotFound; }

# wait_until SECONDS DESCRIPTION COMMAND...: poll COMMAND (every 0.25 s) until it succeeds.
wait_until() {
  local secs=$1 what=$2; shift 2
  local end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < end)) || fail "timed out after ${secs}s waiting for: $what"
    sleep 0.25
  done
}

# Build if needed (cached), then start; the env lines set KUBECONFIG and PATH (kubectl).
t0=$SECONDS
eval "$("$cp" start "$work")"
ok "control plane started in $((SECONDS - t0))s (API server $FCC_CP_APISERVER)"
command -v kubectl | grep -q "^$FCC_CP_BIN/" || fail "kubectl is not the one built by the harness"

kubectl get --raw /version | grep -q '"gitVersion"' || fail "/version"
kubectl create namespace "$ns" >/dev/null
wait_until 30 "default ServiceAccount in $ns" kubectl -n "$ns" get serviceaccount default
tok=$(kubectl -n "$ns" create token default --duration=10m) || fail "TokenRequest"
# Token only (no admin client cert, which the API server would check first).
[[ $(kubectl --kubeconfig=/dev/null --server="$FCC_CP_APISERVER" --certificate-authority="$FCC_CP_DIR/pki/ca.crt" \
       --token="$tok" auth whoami -o jsonpath='{.status.userInfo.username}') == "system:serviceaccount:$ns:default" ]] ||
  fail "a service-account token is not accepted"
ok "namespace, default ServiceAccount, service-account token"

# The Job shape the controller creates (design brief §9), trimmed.
kubectl -n "$ns" apply --server-side --field-manager=smoke -f - >/dev/null <<'EOF'
apiVersion: batch/v1
kind: Job
metadata:
  name: smoke
spec:
  completionMode: Indexed
  completions: 3
  parallelism: 3
  suspend: true
  successPolicy:
    rules:
    - succeededIndexes: "0"
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: broker
        image: example.invalid/flux:latest
        command: ["true"]
EOF
[[ $(kubectl -n "$ns" get job smoke -o jsonpath='{.spec.successPolicy.rules[0].succeededIndexes}') == 0 ]] ||
  fail "successPolicy not stored"
# The Job controller sets Suspended in the sync that would otherwise have
# created the pods (they come first in that sync): once it shows, the Job
# controller has handled the Job, and no pods means none were made.
wait_until 30 "Job condition Suspended" cond_is Suspended True
[[ -z $(kubectl -n "$ns" get pods -o name) ]] || fail "a suspended Job has pods"
ok "suspended Indexed Job with successPolicy: stored, no pods, Suspended condition"

kubectl -n "$ns" patch job smoke --type=merge -p '{"spec":{"suspend":false}}' >/dev/null
wait_until 60 "3 pods created by the Job controller" pods_are 3 batch.kubernetes.io/job-name=smoke
pod0=$(kubectl -n "$ns" get pods -l batch.kubernetes.io/job-completion-index=0 -o jsonpath='{.items[0].metadata.name}')
[[ -n $pod0 ]] || fail "no pod for index 0"
ok "unsuspended: the Job controller created 3 pods (index 0: $pod0)"

# What a kubelet reports when the container exits 0: phase Succeeded and a
# terminated container status. (The Job controller counts the phase; the rest
# keeps the pod realistic.)
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
kubectl -n "$ns" patch pod "$pod0" --subresource=status --type=merge -p "$(cat <<EOF
{"status": {"phase": "Succeeded", "startTime": "$now",
  "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": "$now"}],
  "containerStatuses": [{"name": "broker", "image": "example.invalid/flux:latest", "imageID": "",
    "ready": false, "restartCount": 0, "started": false,
    "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": "$now", "finishedAt": "$now"}}}]}}
EOF
)" >/dev/null || fail "pods/status update refused"

wait_until 60 "Job condition SuccessCriteriaMet" cond_is SuccessCriteriaMet True
ok "index 0 Succeeded -> SuccessCriteriaMet"
wait_until 60 "Job condition Complete" cond_is Complete True
# The other indexes are terminated (no kubelet: unscheduled pods go at once).
wait_until 60 "pods of indexes 1 and 2 deleted" \
  pods_are 0 batch.kubernetes.io/job-name=smoke,batch.kubernetes.io/job-completion-index!=0
st=$(kubectl -n "$ns" get job smoke -o jsonpath='{.status.succeeded} {.status.completedIndexes}')
[[ $st == "1 0" ]] || fail "Job status succeeded/completedIndexes = '$st', want '1 0'"
[[ -z $(cond Failed) ]] || fail "Job also has a Failed condition"
ok "Job Complete through successPolicy; other pods terminated; succeeded=1 completedIndexes=0"

# Deleting the namespace exercises the namespace controller and the garbage collector.
kubectl delete namespace "$ns" --wait=false >/dev/null
wait_until 90 "namespace $ns deleted" gone namespace "$ns"
ok "namespace deleted (namespace controller)"
