#!/usr/bin/env bash
# The Flux view runs Flux where nothing else is: a root holding only the
# app-busybox test image (a static busybox, no libc, no ld.so, no passwd)
# and empty /proc /dev /sys /tmp /run /etc/flux, with the view extracted
# from `scripts/image view`'s archive bound read-only, nosuid, nodev at
# /opt/flux. As uid 4242, which has no passwd entry, chrooted there:
#   flux start  (rc1, rc3 through flux modprobe: Python, dash)
#   flux run -n1 /bin/busybox hostname       the node's name
#   flux python -c 'import flux, sys; ...'   /opt/flux
#   flux resource list / overlay status / jobs -a
#   a job's environment: no PYTHONPATH, PYTHONHOME or LD_PRELOAD
#   flux run -o pmi=simple,pmix: no stderr (OpenPMIx in the job shell
#     warns when its component path names a missing directory), and the
#     shell maps the view's libpmix and its plugins, nothing else's
#   every shared object mapped by any process in the root is the view's
# Any library from outside the view would have to come from that root,
# which has none: the point. Also runs images/view/check-view on the
# extracted archive.
#
#   run_view.sh REPO_DIR
# Needs root and a private mount namespace (scripts/test runs ctest in
# one): skipped otherwise, failed with FCC_REQUIRE_MOUNT_TESTS=1. Its own
# mounts are in a nested namespace and die with it. Builds the view and
# app-busybox if missing (cold ~3 min), else ~5 s.
set -euo pipefail

repo=$(cd "$1" && pwd)

if [[ ${FCC_VIEW_TEST_IN_NS:-} != "$$" ]]; then
  problem=
  if [[ $(id -u) != 0 ]]; then
    problem="needs root (chroot, mounts)"
  elif [[ $(readlink /proc/self/ns/mnt) == "$(readlink /proc/1/ns/mnt 2>/dev/null)" ]]; then
    problem="not in a private mount namespace (run under unshare -m --propagation private)"
  fi
  if [[ -n $problem ]]; then
    if [[ ${FCC_REQUIRE_MOUNT_TESTS:-} == 1 ]]; then echo "FAIL: $problem"; exit 1; fi
    echo "SKIP: $problem"; exit 77
  fi
  view_tar=$("$repo/scripts/image" view | tail -1)
  bb_tar=$("$repo/scripts/image" app-busybox | tail -1)
  exec env FCC_VIEW_TEST_IN_NS=$$ unshare -m --propagation private "$0" "$repo" "$view_tar" "$bb_tar"
fi
view_tar=$2 bb_tar=$3

fails=0 passes=0
ok() { echo "ok: $*"; passes=$((passes + 1)); }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

d=$(mktemp -d /tmp/fcc-view.XXXXXX)
# Everything on a tmpfs of this namespace: one umount removes it.
mount -t tmpfs -o mode=0755 fcc-view "$d"
cleanup() {
  umount -R "$d" 2>/dev/null || umount -l "$d" 2>/dev/null || true
  rmdir "$d" 2>/dev/null || true
}
trap cleanup EXIT

# The view as the driver image will carry it: <name>/...
mkdir "$d/views"
tar -C "$d/views" --numeric-owner -xpf "$view_tar"
name=$(ls "$d/views")
view="$d/views/$name"
if python3 "$repo/images/view/check-view" "$view" --prefix /opt/flux 2>"$d/check.log"; then
  ok "check-view $name: $(grep -o '[0-9]* ELF files.*' "$d/check.log")"
else
  cat "$d/check.log"; fail "check-view $name"
fi

# The root: app-busybox's layers (an OCI archive), nothing else.
root="$d/root"
mkdir "$root"
python3 - "$bb_tar" "$root" <<'EOF'
import json, sys, tarfile
archive, root = sys.argv[1:3]
with tarfile.open(archive) as oci:
    def blob(digest):
        return oci.extractfile("blobs/" + digest.replace(":", "/"))
    index = json.load(oci.extractfile("index.json"))
    manifest = json.load(blob(index["manifests"][0]["digest"]))
    for layer in manifest["layers"]:
        with tarfile.open(fileobj=blob(layer["digest"]), mode="r|*") as t:
            t.extractall(root, numeric_owner=True)
EOF
others=$(cd "$root" && find . -mindepth 1 ! -path ./bin ! -path './bin/*')
bbinterp=$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import viewelf
e = viewelf.Elf(sys.argv[2]); print(e.interp or ("dynamic" if e.needed else "static"))' \
  "$repo/images/view" "$root/bin/busybox" 2>&1 || true)
if [[ -x $root/bin/busybox && -z $others && $bbinterp == static ]]; then
  ok "app-busybox: only /bin ($(ls "$root/bin" | wc -l) entries), busybox static"
else
  fail "app-busybox holds more than a static busybox: ${others:0:200} (busybox: $bbinterp)"
fi
mkdir -p "$root"/{proc,dev,sys,tmp,run,etc/flux,opt/flux}
chmod 1777 "$root/tmp" "$root/run"
mount -t proc proc "$root/proc"
# hwloc reads the topology from /sys, as in a pod.
mount --rbind /sys "$root/sys" && mount -o remount,bind,ro "$root/sys" || true
for n in null zero random urandom; do
  touch "$root/dev/$n"; mount --bind "/dev/$n" "$root/dev/$n"
done
mount --bind "$view" "$root/opt/flux"
mount -o remount,bind,ro,nosuid,nodev "$root/opt/flux"

# What runs inside the instance: dash from the view, busybox from the
# image. Each step's output follows its marker.
cat > "$root/tmp/steps" <<'EOF'
echo "== hostname"; flux run -n1 /bin/busybox hostname
echo "== prefix"; flux python -c 'import flux, sys; print(sys.prefix)'
echo "== resource"; flux resource list
echo "== overlay"; flux overlay status
echo "== env"; flux run -n1 /bin/busybox env
echo "== pmix"
flux run -n1 -o pmi=simple,pmix /bin/busybox sh -c 'cat /proc/$PPID/maps' 2>/tmp/pmix.err |
  /bin/busybox awk '$6 ~ /pmix.*\.so/ {print $6}' | /bin/busybox sort -u
echo "== pmix stderr"; /bin/busybox cat /tmp/pmix.err
echo "== jobs"; flux jobs -a -n -o '{id.f58} {status}'
echo "== maps"
for p in /proc/[0-9]*; do /bin/busybox cat "$p/maps" 2>/dev/null; done |
  /bin/busybox awk '$6 ~ /\.so/ {print $6}' | /bin/busybox sort -u
echo "== end"
EOF
# The environment a pod would give: HOME (containerd's "/" for a uid with
# no passwd entry); SHELL and the state dir as the controller's start script
# sets them (flux's broker runs rc1/rc3 with $SHELL, default /bin/bash, and
# puts its state dir in $TMPDIR, default /var/tmp).
t=$SECONDS
rc=0
env -i PATH=/bin HOME=/ SHELL=/opt/flux/libexec/flux-view/sh \
  "$(command -v timeout)" 60 "$(command -v chroot)" --userspec=4242:4242 "$root" \
  /opt/flux/bin/flux start -o,-Srundir=/run/flux,-Sstatedir=/run/flux/state,-Slocal-uri=local:///run/flux/local \
  /opt/flux/libexec/flux-view/sh /tmp/steps >"$d/out" 2>"$d/err" || rc=$?
secs=$((SECONDS - t))
section() { sed -n "/^== $1\$/,/^== /p" "$d/out" | sed '1d;$d'; }
if [[ $rc == 0 ]] && grep -q '^== end$' "$d/out"; then
  ok "flux start as uid 4242 in a busybox-only root (${secs}s)"
else
  cat "$d/out" "$d/err" | tail -40; fail "flux start: exit $rc"
fi
[[ $(section hostname) == "$(uname -n)" ]] && ok "flux run -n1 hostname: $(section hostname)" ||
  fail "flux run hostname: '$(section hostname)'"
[[ $(section prefix) == /opt/flux ]] && ok "flux python: sys.prefix /opt/flux" ||
  fail "flux python: '$(section prefix)'"
grep -qE '^ *free +1 ' <<<"$(section resource)" && ok "flux resource list: 1 node free" ||
  { section resource; fail "flux resource list"; }
grep -qE ': full$' <<<"$(section overlay)" && ok "flux overlay status: full" ||
  { section overlay; fail "flux overlay status"; }
[[ $(section jobs | grep -c ' COMPLETED$') -ge 2 ]] && ok "flux jobs -a: both jobs completed" ||
  { section jobs; fail "flux jobs -a"; }
jobenv=$(section env)
# The view's job-shell plugin (view-env.lua) drops Flux's PMI directory
# from LD_LIBRARY_PATH and the view's SHELL, which the initial program has.
bad=$(grep -E '^(PYTHONPATH|PYTHONHOME|LD_PRELOAD|LD_AUDIT|LD_LIBRARY_PATH|SHELL)=' <<<"$jobenv" || true)
[[ -n $jobenv && -z $bad ]] && ok "job environment: no PYTHONPATH, PYTHONHOME, LD_PRELOAD, LD_LIBRARY_PATH, SHELL" ||
  fail "job environment: $bad"
grep -q '^PMI_RANK=0$' <<<"$jobenv" && ok "job environment: Flux's PMI still set (PMI_RANK)" ||
  fail "job environment: no PMI_RANK"
echo "job environment pointing into the view: $(grep '/opt/flux' <<<"$jobenv" | cut -d= -f1 | xargs)"
# flux-pmix's server (libpmix in the job shell, the task's parent) reads
# its MCA params file and loads its plugins from the view, not from the
# image's /usr/lib/x86_64-linux-gnu/pmix2 (Debian's compiled-in prefix).
pmixerr=$(section 'pmix stderr')
[[ -z $pmixerr ]] && ok "flux run -o pmi=simple,pmix: no stderr" ||
  fail "flux run -o pmi=simple,pmix: stderr: $(head -c 600 <<<"$pmixerr")"
pmixmaps=$(section pmix)
if grep -qx /opt/flux/lib/system/libpmix.so.2 <<<"$pmixmaps" &&
   grep -q '^/opt/flux/lib/system/pmix2/lib/pmix/pmix_mca_' <<<"$pmixmaps" &&
   ! grep -qv '^/opt/flux/' <<<"$pmixmaps"; then
  ok "job shell maps the view's libpmix and $(grep -c pmix_mca_ <<<"$pmixmaps") of its plugins"
else
  fail "job shell's PMIx objects: $(xargs <<<"$pmixmaps")"
fi
maps=$(section maps)
outside=$(grep -v '^/opt/flux/' <<<"$maps" || true)
if [[ -n $maps && -z $outside ]]; then
  ok "$(wc -l <<<"$maps") shared objects mapped in the root, all from /opt/flux"
else
  fail "shared objects from outside the view: ${outside:-none mapped at all}"
fi

echo "$passes passed, $fails failed"
((fails == 0))
