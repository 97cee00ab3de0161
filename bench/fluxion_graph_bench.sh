#!/usr/bin/env bash
# Rank 0's memory for Fluxion's resource graph (issue 63): for each
# <brokers>x<cores>, rank 0 of an instance of that many brokers whose config
# gives every broker that many cores, as the controller's [resource.config]
# does. Only rank 0 runs (broker.quorum 1): Fluxion builds its graph from R
# for every rank whether up or not, and matches one job against it. Prints
# one row each: rank 0's peak RSS (VmHWM) and start -> a job matched.
#   bench/fluxion_graph_bench.sh [NxC ...]   (default: 1024x128 256x1024)
#   SCHED=simple: sched-simple instead of Fluxion, for comparison.
# Root: it binds flux-core and Fluxion (scripts/flux-core-tarball) at
# /opt/flux in a private mount namespace of its own. A row at 1024x1024
# needs about 10 GiB.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
if [[ ${FCC_GRAPH_STAGE:-} != inside ]]; then
  core=$("$repo/scripts/flux-core-tarball" core)
  sched=$("$repo/scripts/flux-core-tarball" sched)
  work=$(mktemp -d /tmp/fcc-graph.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  tar -C "$work" -xzf "$core"
  tar -C "$work" -xzf "$sched"
  FCC_GRAPH_STAGE=inside FCC_GRAPH_WORK=$work unshare -m --propagation private \
    "$0" "${@:-1024x128 256x1024}"
  exit
fi

work=$FCC_GRAPH_WORK
mkdir -p /opt/flux
mount --bind "$work/flux" /opt/flux
export PATH=/opt/flux/bin:$PATH
flux keygen "$work/curve.cert" >/dev/null
chmod 600 "$work/curve.cert"
if [[ ${SCHED:-fluxion} == simple ]]; then
  scheduler=$'[modules.alternatives]\nsched = "sched-simple"\nfeasibility = "sched-simple"'
else
  scheduler=$'[sched-fluxion-qmanager]\nqueue-policy = "fcfs"\n[sched-fluxion-resource]\nmatch-policy = "first"'
fi
printf '%8s %6s %10s %9s %20s %8s\n' brokers cores total scheduler rank0_peak_rss_MiB ready_s
for shape in $*; do
  n=${shape%x*} c=${shape#*x}
  run=$work/run-$shape
  mkdir -p "$run"
  cat >"$run/broker.toml" <<TOML
[bootstrap]
curve_cert = "$work/curve.cert"
default_port = 18250
default_bind = "tcp://127.0.0.1:%p"
default_connect = "tcp://127.0.0.1:%p"
hosts = [ { host = "mc-[0-$((n - 1))]" } ]
[resource]
noverify = true
[[resource.config]]
hosts = "mc-[0-$((n - 1))]"
cores = "0-$((c - 1))"
$scheduler
[tbon]
topo = "kary:32"
TOML
  start=$(date +%s.%N)
  flux broker -Shostname=mc-0 --config-path="$run/broker.toml" -Srundir="$run" \
    -Slocal-uri="local://$run/local" -Sbroker.rc2_none=1 -Sbroker.quorum=1 \
    >"$run/log" 2>&1 &
  broker=$!
  export FLUX_URI=local://$run/local
  for _ in $(seq 1200); do flux resource list >/dev/null 2>&1 && break; sleep 0.5; done
  # A job matched against the whole graph: the scheduler has built it.
  job=$(flux submit -N1 -n1 true)
  flux job wait-event -t 600 "$job" alloc >/dev/null
  ready=$(echo "$(date +%s.%N) - $start" | bc)
  hwm=$(awk '/VmHWM/ {print $2}' "/proc/$broker/status")
  printf '%8d %6d %10d %9s %20d %8.1f\n' "$n" "$c" $((n * c)) "${SCHED:-fluxion}" \
    $((hwm / 1024)) "$ready"
  flux shutdown --quiet >/dev/null 2>&1 || kill "$broker"
  wait "$broker" || true
done
