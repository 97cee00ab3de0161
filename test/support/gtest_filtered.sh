#!/usr/bin/env bash
# Runs a GoogleTest binary on a --gtest_filter, after checking that each of
# the filter's positive patterns matches at least one test: a renamed suite
# would otherwise leave its pattern matching nothing and the ctest entry
# passing (Debian 12's gtest 1.12 has no --gtest_fail_if_no_test_selected).
# Then checks that gtest ran exactly the tests listed.
#   gtest_filtered.sh BINARY PATTERN[:PATTERN...][-NEGATIVE...] [ARGS...]
set -euo pipefail
binary=$1 filter=$2
shift 2

count_listed() {  # test names are the indented lines of --gtest_list_tests
  "$binary" --gtest_list_tests --gtest_filter="$1" | grep -c '^  ' || true
}

IFS=: read -ra patterns <<<"${filter%%-*}"
((${#patterns[@]} > 0)) || { echo "gtest_filtered: no pattern in '$filter'" >&2; exit 2; }
for pattern in "${patterns[@]}"; do
  if (($(count_listed "$pattern") == 0)); then
    echo "gtest_filtered: '$pattern' matches no test of $binary" >&2
    exit 1
  fi
done
listed=$(count_listed "$filter")

out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
"$binary" --gtest_filter="$filter" "$@" | tee "$out" || rc=$?
((rc == 0)) || exit "$rc"
ran=$(sed -n 's/^\[==========\] \([0-9]*\) tests\? from .* ran\..*/\1/p' "$out")
if [[ $ran != "$listed" ]]; then
  echo "gtest_filtered: $listed tests listed for '$filter', ${ran:-none} ran" >&2
  exit 1
fi
echo "gtest_filtered: $ran tests ran, ${#patterns[@]} patterns, each matched"
