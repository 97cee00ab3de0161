#!/usr/bin/env bash
# deploy/multikueue/worker-kubeconfig writes its one-year credential safely
# (issue 42, item 6), with a stand-in kubectl that answers as a worker's
# would: OUT is a new file, mode 0600 from its first byte, never a symlink's
# target; nothing goes to stdout unless asked for with "-" (and then not to
# a terminal); a server or tls-server-name that could break out of its YAML
# string is refused, and the file parses with exactly the fields written.
#   test/deploy/worker_kubeconfig_test.sh REPO
set -euo pipefail

repo=$(cd "${1:?usage: worker_kubeconfig_test.sh REPO}" && pwd)
script=$repo/deploy/multikueue/worker-kubeconfig
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# The stand-in kubectl: the cluster of FAKE_SERVER / FAKE_TLS_NAME, a
# ServiceAccount that exists, and a token.
mkdir "$work/bin"
cat >"$work/bin/kubectl" <<'EOF'
#!/usr/bin/env bash
args="$*"
case $args in
  *"config view"*"contexts[0].context.cluster"*) printf worker1 ;;
  *"config view"*"cluster.server"*) printf '%s' "$FAKE_SERVER" ;;
  *"config view"*"certificate-authority-data"*) printf 'Q0EgZGF0YQ==' ;;
  *"config view"*"insecure-skip-tls-verify"*) ;;
  *"config view"*"tls-server-name"*) printf '%s' "${FAKE_TLS_NAME:-}" ;;
  *"get serviceaccount"*) echo serviceaccount/multikueue-sa ;;
  *"create token"*) echo "eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl 2027-01-01T00:00:00Z" ;;
  *) echo "fake kubectl: unexpected: $args" >&2; exit 1 ;;
esac
EOF
chmod +x "$work/bin/kubectl"
export PATH=$work/bin:$PATH FAKE_SERVER=https://worker1.example.com:6443

run() { "$script" "$@" 2>"$work/stderr"; }

# 1. OUT a symlink: the file it points to is never written.
echo "victim's bytes" >"$work/victim"
ln -s "$work/victim" "$work/link.kubeconfig"
if run "$work/link.kubeconfig" >"$work/stdout"; then
  [[ ! -L $work/link.kubeconfig ]] || fail "OUT is still the symlink"
else
  grep -q "symlink" "$work/stderr" || fail "a symlink OUT refused without saying why: $(cat "$work/stderr")"
fi
[[ $(cat "$work/victim") == "victim's bytes" ]] ||
  fail "the symlink's target was overwritten: $(head -c 80 "$work/victim")"

# 2. OUT an existing file readable by all: replaced by a new file, 0600 from
# the start (its inode changes), never written through the old one.
echo old >"$work/old.kubeconfig"
chmod 0644 "$work/old.kubeconfig"
inode=$(stat -c %i "$work/old.kubeconfig")
run "$work/old.kubeconfig" >"$work/stdout" || fail "rewriting an existing OUT: $(cat "$work/stderr")"
[[ $(stat -c %a "$work/old.kubeconfig") == 600 ]] || fail "OUT mode $(stat -c %a "$work/old.kubeconfig")"
[[ $(stat -c %i "$work/old.kubeconfig") != "$inode" ]] ||
  fail "the existing file was written in place (it was 0644 until the chmod)"
[[ ! -s $work/stdout ]] || fail "a kubeconfig written to a file also went to stdout"
leftover=$(find "$work" -maxdepth 1 -name '.worker-kubeconfig.*')
[[ -z $leftover ]] || fail "temporary file left: $leftover"

# 3. No OUT: refused, the credential printed nowhere; "-" prints it.
if run >"$work/stdout"; then fail "no OUT: the kubeconfig went to stdout by default"; fi
if grep -q "eyJhbGciOi" "$work/stdout" "$work/stderr"; then fail "no OUT: the token was printed"; fi
run - >"$work/stdout" || fail "OUT -: $(cat "$work/stderr")"
grep -q "token: \"eyJhbGciOi" "$work/stdout" || fail "OUT -: no token on stdout"
if command -v script >/dev/null; then
  # stdout a terminal: refused even with "-".
  script -qec "$script - 2>/dev/null" /dev/null >"$work/tty" || true
  if grep -q "eyJhbGciOi" "$work/tty"; then fail "OUT - printed the token on a terminal"; fi
fi

# 4. Values that would end their YAML string are refused; a clean file
# parses to exactly what was asked for.
for bad in 'https://worker1.example.com:6443/x"
      insecure-skip-tls-verify: true
      y: "' 'https://worker1.example.com:6443/a\b' 'https://worker1.example.com:6443/ x'; do
  if FAKE_SERVER=$bad run "$work/bad.kubeconfig" >/dev/null; then
    fail "server $(printf %q "$bad") accepted"
  fi
done
if FAKE_TLS_NAME=$'api.example.com\n      insecure-skip-tls-verify: true' \
  run "$work/bad.kubeconfig" >/dev/null; then
  fail "a tls-server-name with a newline accepted"
fi
[[ ! -e $work/bad.kubeconfig ]] || fail "a refused run left $work/bad.kubeconfig"
FAKE_SERVER=https://worker1.example.com:6443/api/prefix FAKE_TLS_NAME=api.example.com \
  run "$work/good.kubeconfig" || fail "a clean kubeconfig refused: $(cat "$work/stderr")"
python3 - "$work/good.kubeconfig" <<'EOF' || fail "the clean kubeconfig does not parse as written"
import sys, yaml
kc = yaml.safe_load(open(sys.argv[1]))
cluster = kc["clusters"][0]["cluster"]
assert cluster == {"server": "https://worker1.example.com:6443/api/prefix",
                   "certificate-authority-data": "Q0EgZGF0YQ==",
                   "tls-server-name": "api.example.com"}, cluster
assert kc["users"][0]["user"] == {"token": "eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl"}
EOF

if ((failures)); then
  echo "worker_kubeconfig_test: $failures failure(s)" >&2
  exit 1
fi
echo "worker_kubeconfig_test: ok"
