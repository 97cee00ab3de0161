#!/usr/bin/env bash
# The images scripts/image builds work in containerd as kubelet's runtime
# would use them: each OCI archive is imported with `ctr -n k8s.io images
# import` into a throwaway containerd (its own root, state and socket in a
# temp dir, in a private mount namespace) and run with `ctr run`:
#   pause   starts, stays up, exits 0 on SIGTERM (and reports its version)
#   driver  (--prebuilt BUILD_DIR) flux-curve-csi --version, as the image's
#           non-root user by default; minicluster-controller --help
#   flux    (only if scripts/flux-core-tarball finds one, or
#           FCC_IMAGE_TEST_FLUX=1) flux version, as user flux; then the
#           driver image carries the Flux view (its view.json), and the
#           test application images run: app-busybox (busybox only),
#           app-mpich (mpi-hello, no python3), app-openmpi,
#           app-openmpi-bullseye and app-openmpi5 (Open MPI 4, 4, 5,
#           mpi-hello, no python3), app-python
#
#   check_images.sh REPO_DIR BUILD_DIR
# Env: FCC_IMAGE_DRIVER_TAR (see below), FCC_IMAGE_TEST_FLUX=1 (flux image
# required).
# Builds what is missing (cold: ~4 min, mostly Debian downloads), else
# reuses the cached archives (seconds).
set -euo pipefail

repo=$(cd "$1" && pwd)
build_dir=$(cd "$2" && pwd)

if [[ ${FCC_CHECK_IMAGES_IN_NS:-} != "$$" ]]; then
  for tool in containerd ctr runc buildah mmdebstrap; do
    command -v "$tool" >/dev/null || { echo "check_images: $tool missing (scripts/install-deps)" >&2; exit 1; }
  done
  exec env FCC_CHECK_IMAGES_IN_NS=$$ unshare -m --propagation private "$0" "$repo" "$build_dir"
fi

fails=0 passes=0
ok() { echo "ok: $*"; passes=$((passes + 1)); }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

t=$SECONDS
pause_tar=$("$repo/scripts/image" pause | tail -1)
# FCC_IMAGE_DRIVER_TAR: check that driver archive instead (e.g. the output of
# the full `scripts/image driver` build).
driver_tar=${FCC_IMAGE_DRIVER_TAR:-$("$repo/scripts/image" driver --prebuilt "$build_dir" | tail -1)}
flux_tar=
if [[ ${FCC_IMAGE_TEST_FLUX:-} == 1 ]] || "$repo/scripts/flux-core-tarball" >/dev/null 2>&1; then
  flux_tar=$("$repo/scripts/image" flux | tail -1)
  app_tars=()
  for app in app-busybox app-mpich app-openmpi app-openmpi-bullseye app-openmpi5 app-python; do
    app_tars+=("$("$repo/scripts/image" "$app" | tail -1)")
  done
fi
echo "images ready in $((SECONDS - t))s: $pause_tar $driver_tar $flux_tar"

d=$(mktemp -d /tmp/fcc-images.XXXXXX)
cpid=
cleanup() {
  local t=$SECONDS
  [[ -z $cpid ]] || { kill "$cpid" 2>/dev/null; wait "$cpid" 2>/dev/null || true; }
  echo "containerd stopped in $((SECONDS - t))s" >&2
  umount /run/containerd 2>/dev/null || true
  umount "$d" 2>/dev/null || true
  rm -rf "$d"
  echo "cleaned up in $((SECONDS - t))s" >&2
}
trap cleanup EXIT
# All of it on a tmpfs of this namespace: the native snapshotter copies the
# image for every container, and deleting those copies from disk took a
# minute on this 2-core machine; a tmpfs goes in one umount.
mount -t tmpfs -o mode=0700,size=8g fcc-ctr "$d"
mkdir -p "$d/root" "$d/state" "$d/run"
# Shims and runc keep state under /run/containerd: hiding it behind ours
# keeps this containerd apart from any on the host.
mkdir -p /run/containerd
mount --bind "$d/run" /run/containerd
cat > "$d/config.toml" <<EOF
version = 2
root = "$d/root"
state = "$d/state"
[grpc]
  address = "$d/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
  sandbox_image = "localhost/pause:fcc"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
EOF
containerd --config "$d/config.toml" >"$d/containerd.log" 2>&1 &
cpid=$!
for _ in $(seq 100); do [[ -S $d/containerd.sock ]] && break; sleep 0.1; done
[[ -S $d/containerd.sock ]] || { cat "$d/containerd.log"; echo "FAIL: containerd did not start"; exit 1; }
ctr=(ctr --address "$d/containerd.sock" -n k8s.io)
run=("${ctr[@]}" run --snapshotter native --rm)

import() { # ARCHIVE REF
  if "${ctr[@]}" images import --snapshotter native "$1" >"$d/import.log" 2>&1 &&
     "${ctr[@]}" images ls -q | grep -x "$2" >/dev/null; then
    ok "import $2 ($(du -h "$1" | cut -f1))"
  else
    cat "$d/import.log"; fail "import $2 from $1"
  fi
}

expect() { # DESCRIPTION PATTERN COMMAND...
  local what=$1 pattern=$2 outp; shift 2
  if outp=$("$@" 2>&1) && grep -qE "$pattern" <<<"$outp"; then
    ok "$what"
  else
    printf '%s\n' "$outp" | tail -20; fail "$what"
  fi
}

# pause
import "$pause_tar" localhost/pause:fcc
expect "pause -v" '^pause ' "${run[@]}" localhost/pause:fcc p0 /pause -v
"${run[@]}" localhost/pause:fcc p1 >"$d/p1.log" 2>&1 & rpid=$!
up=no
for _ in $(seq 50); do
  "${ctr[@]}" task ls 2>/dev/null | grep -E '^p1 .*RUNNING' >/dev/null && { up=yes; break; }
  sleep 0.1
done
sleep 0.5
if [[ $up == yes ]] && "${ctr[@]}" task ls | grep -E '^p1 .*RUNNING' >/dev/null; then ok "pause stays up"; else fail "pause is not running"; fi
"${ctr[@]}" task kill -s SIGTERM p1 >/dev/null 2>&1 || true
rc=0
timeout 20 tail --pid="$rpid" -f /dev/null || rc=timeout
wait "$rpid" || rc=$?
[[ $rc == 0 ]] && ok "pause exits 0 on SIGTERM" || { cat "$d/p1.log"; fail "pause on SIGTERM: exit $rc"; }

# driver (both programs, the Dockerfile's runtime stage)
import "$driver_tar" localhost/flux-curve-csi:dev
version=$(awk -F'[()]' '/^project\(flux-curve-csi/ {print $0}' "$repo/CMakeLists.txt" | grep -oE 'VERSION [0-9.]+' | cut -d' ' -f2)
expect "flux-curve-csi --version ($version)" "$version" "${run[@]}" localhost/flux-curve-csi:dev d1 flux-curve-csi --version
expect "minicluster-controller --help" '[Uu]sage|--' "${run[@]}" localhost/flux-curve-csi:dev d2 minicluster-controller --help
expect "image runs as non-root by default" '^65532$' "${run[@]}" localhost/flux-curve-csi:dev d3 sh -c 'id -u'
expect "default CMD runs" '[Uu]sage|serve' "${run[@]}" localhost/flux-curve-csi:dev d4

# flux
if [[ -n $flux_tar ]]; then
  import "$flux_tar" localhost/flux-core:0.88.0
  expect "flux version" 'commands:' "${run[@]}" localhost/flux-core:0.88.0 f1 flux version
  # A real one-broker instance, as the image's user flux (ctr run has no
  # --user): it starts, answers, and shuts down.
  expect "flux start (a broker as user flux)" '^1$' "${run[@]}" localhost/flux-core:0.88.0 f2 \
    setpriv --reuid=1000 --regid=1000 --clear-groups env HOME=/home/flux \
    flux start flux getattr size

  # The view the driver serves, where the Dockerfile puts it.
  expect "driver image carries the view flux-core-0.88.0" '"name": "flux-core-0.88.0"' \
    "${run[@]}" localhost/flux-curve-csi:dev d5 sh -c 'cat /usr/share/flux-curve-csi/views/*/share/flux-view/view.json'
  import "${app_tars[0]}" localhost/app-busybox:fcc
  import "${app_tars[1]}" localhost/app-mpich:fcc
  import "${app_tars[2]}" localhost/app-openmpi:fcc
  import "${app_tars[3]}" localhost/app-openmpi-bullseye:fcc
  import "${app_tars[4]}" localhost/app-openmpi5:fcc
  import "${app_tars[5]}" localhost/app-python:fcc
  expect "app-busybox: only busybox, no libc" '^ok$' "${run[@]}" localhost/app-busybox:fcc a1 \
    /bin/sh -c 'ls /lib /lib64 /usr /etc/passwd >/dev/null 2>&1 && echo has-more || echo ok'
  expect "app-mpich: mpi-hello (singleton), no python3" '^rank 0 of 1 on .*nopython$' "${run[@]}" localhost/app-mpich:fcc a2 \
    sh -c 'mpi-hello | tr -d "\n"; command -v python3 >/dev/null || echo nopython'
  for v in app-openmpi:4 app-openmpi-bullseye:4 app-openmpi5:5; do
    expect "${v%:*}: Open MPI ${v#*:} and mpi-hello, no python3" "^${v#*:} nopython\$" "${run[@]}" \
      "localhost/${v%:*}:fcc" "o${v%:*}" sh -c 'ompi_info --parsable | sed -n "s/^ompi:version:full:\([0-9]\).*/\1/p" | tr -d "\n";
        test -x /usr/local/bin/mpi-hello && ! command -v python3 >/dev/null && echo " nopython"'
  done
  expect "app-python: python3, no flux" '^3\.11 noflux$' "${run[@]}" localhost/app-python:fcc a3 \
    sh -c 'python3 -c "import sys; print(\"%d.%d\" % sys.version_info[:2], end=\" \")"; command -v flux >/dev/null || echo noflux'
fi

echo "$passes passed, $fails failed"
((fails == 0))
