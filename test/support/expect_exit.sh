#!/usr/bin/env bash
# Runs CMD and passes only if it exits with CODE and its output (stdout and
# stderr together) matches the extended regular expression: ctest's
# PASS_REGULAR_EXPRESSION alone ignores the exit status, so a crash after
# the expected message would pass.
#   expect_exit.sh CODE REGEX CMD [ARGS...]
set -uo pipefail
code=$1 regex=$2
shift 2
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if ((rc != code)); then
  echo "expect_exit: exit status $rc, expected $code" >&2
  exit 1
fi
if ! grep -qE -- "$regex" <<<"$out"; then
  echo "expect_exit: no line matches /$regex/" >&2
  exit 1
fi
echo "expect_exit: exit status $code and /$regex/ as expected"
