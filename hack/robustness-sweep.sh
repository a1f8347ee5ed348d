#!/usr/bin/env bash
# Replays the recommended policy on the workload family under each
# configuration given and prints a row of goal counts per configuration
# (robustness.CountGoals: workloads missing each goal, scale events), the
# table of docs/autoscaling.md's "Robustness" sweeps.
#
#   hack/robustness-sweep.sh "today's defaults|" "hold 2 start-ups|--capacity-scale-down-window=120s"
#
# Each argument is NAME|FLAGS, FLAGS passed to hack/offline-replay; with
# none, the 17 configurations of docs/autoscaling.md's third round (at
# value 1 and twice static's replicas, that round's defaults). Each is
# about a minute of CPU; set SWEEP_LOG to a folder to keep each one's
# per-workload lines.
set -euo pipefail
if [[ $# -eq 0 ]]; then
	third="--max-of-static=2 --capacity-target=1"
	spread="--capacity-spread-kv --capacity-settled-spread"
	loop="--capacity-min-correction=0.5 --capacity-max-correction=1"
	set -- \
		"today's defaults (hold 1 start-up, 60 s)|$third" \
		"hold 1.5 start-ups (90 s)|$third --capacity-scale-down-window=90s" \
		"hold 2 start-ups (120 s)|$third --capacity-scale-down-window=120s" \
		"hold 126 s (2 start-ups of 63 s, unrounded)|$third --capacity-scale-down-window=126s" \
		"hold 135 s|$third --capacity-scale-down-window=135s" \
		"hold 2.5 start-ups (150 s)|$third --capacity-scale-down-window=150s" \
		"50% a minute down, hold 60 s|$third --capacity-scale-down-percent=50" \
		"50% a minute down, hold 120 s|$third --capacity-scale-down-percent=50 --capacity-scale-down-window=120s" \
		"50% a minute down, hold 150 s|$third --capacity-scale-down-percent=50 --capacity-scale-down-window=150s" \
		"spread KV, loop [1/2, 1] (the second round's G)|$third --capacity-spread-kv $loop" \
		"spread KV, settled spread|$third $spread" \
		"spread KV, settled spread, loop [1/2, 1]|$third $spread $loop" \
		"spread KV, hold 120 s|$third --capacity-spread-kv --capacity-scale-down-window=120s" \
		"spread KV, settled spread, hold 120 s|$third $spread --capacity-scale-down-window=120s" \
		"spread KV, settled spread, loop [1/2, 1], hold 90 s|$third $spread $loop --capacity-scale-down-window=90s" \
		"spread KV, settled spread, loop [1/2, 1], hold 120 s|$third $spread $loop --capacity-scale-down-window=120s" \
		"spread KV, settled spread, loop [1/2, 1], hold 150 s|$third $spread $loop --capacity-scale-down-window=150s"
fi
cd "$(dirname "$0")/.."
source hack/lib/goenv.sh
bin=$(mktemp -d)/offline-replay
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" ./hack/offline-replay
echo "| configuration | SLO minutes < 90% of static's | GPU-hours > static's | bursty > 80% | unserved | scale events |"
echo "|---|---:|---:|---:|---:|---:|"
for spec in "$@"; do
	name=${spec%%|*}
	args=${spec#*|}
	log=/dev/null
	if [[ -n ${SWEEP_LOG:-} ]]; then
		mkdir -p "$SWEEP_LOG"
		log=$SWEEP_LOG/$(tr -c 'A-Za-z0-9' _ <<<"$name").txt
	fi
	# shellcheck disable=SC2086 # FLAGS are words
	row=$("$bin" --family --goal-counts --policies=static-peak,recommended $args 2>"$log")
	echo "| $name ${row}"
done
