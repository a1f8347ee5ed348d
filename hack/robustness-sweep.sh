#!/usr/bin/env bash
# Replays the recommended policy on the workload family under each
# configuration given and prints a row of goal counts per configuration
# (robustness.CountGoals: workloads missing each goal, scale events), the
# table of docs/autoscaling.md's "Robustness" sweeps.
#
#   hack/robustness-sweep.sh "today's defaults|" "hold 2x start-up|--capacity-scale-down-window=150s"
#
# Each argument is NAME|FLAGS, FLAGS passed to hack/offline-replay. Each
# configuration is about a minute of CPU; set SWEEP_LOG to a folder to keep
# each one's per-workload lines.
set -euo pipefail
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
