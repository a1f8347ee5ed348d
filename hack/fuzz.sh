#!/usr/bin/env bash
# Runs every Go fuzz target in the module for the given time each.
set -euo pipefail
fuzztime=${1:-5s}
cd "$(dirname "$0")/.."
fail=0
while IFS= read -r pkg; do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "fuzz: $pkg $target for $fuzztime"
    if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime 2s "$pkg" >/tmp/gpuscale-fuzz.log 2>&1; then
      cat /tmp/gpuscale-fuzz.log; fail=1
    fi
  done
done < <(go list ./...)
exit $fail
