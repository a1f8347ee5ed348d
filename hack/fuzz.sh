#!/usr/bin/env bash
# Runs every Go fuzz target in the module for the given time each.
#
# A run that fails with a bare "context deadline exceeded" and writes no
# failing input is Go's own coordinator racing its -fuzztime deadline
# (go.dev/issue/75804, fixed in Go 1.27), not a finding: it is run again,
# and only a failing input, a test failure or a second different error
# fails the script.
set -euo pipefail
fuzztime=${1:-5s}
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# coordinator_flake: the run failed on the -fuzztime race alone.
coordinator_flake() {
  grep -q '^    context deadline exceeded$' "$log" && ! grep -q 'Failing input written to' "$log"
}

fail=0
# One go list for every package: each go list loads the module's whole
# import graph, about half a second of CPU.
while read -r pkg dir; do
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    for try in 1 2; do
      echo "fuzz: $pkg $target for $fuzztime"
      # shellcheck disable=SC2086 # TESTFLAGS is a list of flags (Makefile)
      if go test ${TESTFLAGS:-} -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime 2s "$pkg" >"$log" 2>&1; then
        break
      fi
      if coordinator_flake; then
        if [[ $try == 1 ]]; then
          echo "fuzz: $target: the fuzzing coordinator's deadline race (go.dev/issue/75804), no failing input; running it again"
          continue
        fi
        echo "fuzz: $target: the coordinator's deadline race twice, no failing input: not a finding"
        break
      fi
      cat "$log"; fail=1; break
    done
  done
done < <(go list -f '{{.ImportPath}} {{.Dir}}' ./...)
exit $fail
