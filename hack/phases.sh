#!/usr/bin/env bash
# Runs `make <phase>` for each phase, stopping at the first that fails, and
# prints each phase's wall time as it ends and as a table at the end, with
# the background builds' times when .ci/run started them.
#
#   hack/phases.sh make race +e2e lint unit wait test-images
#
# A phase written +name runs in the background, its output in
# _output/phase-name.log, beside the phases after it; `wait` waits for every
# background phase and fails if one did. make test uses this to run the
# end-to-end suite, which mostly waits on timers, beside lint, unit and fuzz,
# which mostly compute.
set -uo pipefail
make=$1
shift
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/_output"
start=$SECONDS
rows=()
declare -A bgpid bgstart
summary() {
  echo
  echo "make test: wall time by phase"
  printf '  %-14s %8s  %s\n' phase seconds result
  for row in "${rows[@]}"; do printf '  %-14s %8s  %s\n' $row; done
  printf '  %-14s %8s\n' total $((SECONDS - start))
  if [[ -f "$root/_output/cache-builds.log" ]]; then
    echo "background builds (_output/cache-builds.log):"
    grep -E '(built|failed) ' "$root/_output/cache-builds.log" | sed 's/^/  /' || true
  fi
}
fail() { # phase
  echo "make test: phase $1 FAILED"
  # A background phase runs in a process group of its own: killing the
  # group stops its tests and what they started (a control plane, an
  # adapter on its port), which would otherwise outlive the run.
  for name in "${!bgpid[@]}"; do kill -- "-${bgpid[$name]}" 2>/dev/null; done
  summary
  # A background phase's output is in its log, whose tail above may be
  # another package's: name what failed last, where a CI log's tail shows it.
  if [[ -f "$root/_output/phase-$1.log" ]]; then
    echo "make test: what failed in phase $1 (hack/test-failures.sh _output/phase-$1.log):"
    "$root/hack/test-failures.sh" "$root/_output/phase-$1.log"
  fi
  exit 1
}
wait_background() {
  local failed=""
  for name in "${!bgpid[@]}"; do
    if wait "${bgpid[$name]}"; then
      rows+=("$name $((SECONDS - bgstart[$name])) ok")
      echo "make test: phase $name ok in $((SECONDS - bgstart[$name]))s (log: _output/phase-$name.log)"
    else
      rows+=("$name $((SECONDS - bgstart[$name])) FAILED")
      echo "make test: phase $name FAILED after $((SECONDS - bgstart[$name]))s; the end of _output/phase-$name.log:"
      tail -150 "$root/_output/phase-$name.log"
      failed=$name
    fi
    unset "bgpid[$name]"
  done
  [[ -z "$failed" ]] || fail "$failed"
}
for phase in "$@"; do
  case $phase in
  wait)
    wait_background
    ;;
  +*)
    name=${phase#+}
    echo "make test: phase $name started in the background at $(date -u +%H:%M:%S)"
    setsid "$make" --no-print-directory "$name" >"$root/_output/phase-$name.log" 2>&1 &
    bgpid[$name]=$!
    bgstart[$name]=$SECONDS
    ;;
  *)
    t=$SECONDS
    echo "make test: phase $phase started at $(date -u +%H:%M:%S)"
    if "$make" --no-print-directory "$phase"; then
      rows+=("$phase $((SECONDS - t)) ok")
      echo "make test: phase $phase ok in $((SECONDS - t))s"
    else
      rows+=("$phase $((SECONDS - t)) FAILED")
      fail "$phase"
    fi
    ;;
  esac
done
wait_background
summary
exit 0
