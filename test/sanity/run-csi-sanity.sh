#!/usr/bin/env bash
# Runs csi-sanity against the real driver over its unix socket. Must run in
# a private mount namespace (scripts/test runs CTest in one).
#   run-csi-sanity.sh DRIVER_BINARY
set -euo pipefail

driver=$1
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

self_ns=$(readlink /proc/self/ns/mnt)
if [[ $self_ns == "$(readlink /proc/1/ns/mnt)" ]]; then
  echo "run-csi-sanity: refusing to mount in the host's mount namespace; run via scripts/test" >&2
  exit 1
fi

sanity=$("$repo/scripts/build-csi-sanity")

root=$(mktemp -d /tmp/fcc-sanity-XXXXXX)
mount -t tmpfs -o size=16m,mode=0700 fcc-sanity "$root"
driver_pid=
cleanup() {
  [[ -n $driver_pid ]] && kill "$driver_pid" 2>/dev/null && wait "$driver_pid" 2>/dev/null || true
  umount -R -l "$root" 2>/dev/null || true
  rmdir "$root" 2>/dev/null || true
}
trap cleanup EXIT

head -c 64 /dev/urandom > "$root/master.key"
chmod 0400 "$root/master.key"
"$driver" --log-level=debug serve --endpoint "unix://$root/csi.sock" \
  --node-id sanity-node --master-key-file "$root/master.key" 2> "$root/driver.log" &
driver_pid=$!
for _ in $(seq 100); do [[ -S $root/csi.sock ]] && break; sleep 0.1; done
[[ -S $root/csi.sock ]] || { cat "$root/driver.log"; echo "driver did not start" >&2; exit 1; }

skip=$(sed -e '/^#/d' -e '/^\s*$/d' -e 's/ # .*$//' "$here/skip-list.txt" | paste -sd'|')
set +e
"$sanity" -csi.endpoint "$root/csi.sock" -csi.mountdir "$root/mount" \
  -csi.stagingdir "$root/staging" -ginkgo.skip "$skip" -ginkgo.no-color \
  -ginkgo.timeout 5m > "$root/sanity.log" 2>&1
rc=$?
set -e
grep -E "^\s*\[FAIL\]|Ran [0-9]+ of|Passed \|" "$root/sanity.log" || true
passed=$(grep -oE '[0-9]+ Passed' "$root/sanity.log" | grep -oE '[0-9]+' || echo 0)
failed=$(grep -oE '[0-9]+ Failed' "$root/sanity.log" | grep -oE '[0-9]+' || echo 0)
if ((rc != 0 || failed != 0)); then
  tail -n 200 "$root/sanity.log"
  echo "--- driver log ---"; tail -n 50 "$root/driver.log"
  exit 1
fi
# Exactly the specs this node-only driver runs under csi-sanity v5.6.0 with
# skip-list.txt: the Identity and Node specs, 10 of the 103. A skip-list
# edit that skips one more, or a csi-sanity upgrade (test/sanity/tools
# pins the version), must change these numbers too.
[[ $sanity == */csi-sanity/v5.6.0-*/csi-sanity ]] ||
  { echo "run-csi-sanity: the expected counts are csi-sanity v5.6.0's, not $sanity's" >&2; exit 1; }
summary=$(grep -oE 'Ran [0-9]+ of [0-9]+ Specs' "$root/sanity.log" || true)
if [[ $summary != "Ran 10 of 103 Specs" ]] || ((passed != 10)); then
  echo "run-csi-sanity: '${summary:-no summary}', $passed passed; expected 'Ran 10 of 103 Specs', 10 passed" >&2
  exit 1
fi
echo "csi-sanity: $passed passed, 0 failed ($summary)"
