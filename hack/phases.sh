#!/usr/bin/env bash
# Runs `make <phase>` for each phase in turn, stopping at the first that
# fails, and prints each phase's wall time as it ends and as a table at the
# end, with the background builds' times when .ci/run started them.
#
#   hack/phases.sh make race lint unit ...
set -uo pipefail
make=$1
shift
root=$(cd "$(dirname "$0")/.." && pwd)
start=$SECONDS
rows=()
summary() {
  echo
  echo "make test: wall time by phase"
  printf '  %-14s %8s  %s\n' phase seconds result
  for row in "${rows[@]}"; do printf '  %-14s %8s  %s\n' $row; done
  printf '  %-14s %8s\n' total $((SECONDS - start))
  if [[ -f "$root/_output/cache-builds.log" ]]; then
    echo "background builds (_output/cache-builds.log):"
    grep -E '(built|failed) ' "$root/_output/cache-builds.log" | sed 's/^/  /'
  fi
}
for phase in "$@"; do
  t=$SECONDS
  echo "make test: phase $phase started at $(date -u +%H:%M:%S)"
  if "$make" --no-print-directory "$phase"; then
    rows+=("$phase $((SECONDS - t)) ok")
    echo "make test: phase $phase ok in $((SECONDS - t))s"
  else
    rows+=("$phase $((SECONDS - t)) FAILED")
    echo "make test: phase $phase FAILED after $((SECONDS - t))s"
    summary
    exit 1
  fi
done
summary
