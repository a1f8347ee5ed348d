#!/usr/bin/env bash
# Replays the causal learner (hack/offline-replay's reactive reference with
# --reactive-lookback: the Q-quantile of the exact needs of the current
# minute and the K before it, M above it) on the workload family, over a
# grid of (K, Q, M) and seeds, and prints for each workload how many cells
# meet every goal of issue #31 on each seed, then each cell's row of goal
# counts: docs/autoscaling.md's "Round nine".
#
#   hack/learner-grid.sh                 # 36 cells on seeds 2026, 7 and 99: about 45 minutes of CPU
#   SEEDS=2026 LOOKBACKS=5 QUANTILES=0.75 MARGINS=0.4 hack/learner-grid.sh   # one cell
#
# Set GRID_LOG to a folder to keep each cell's per-workload lines. NEED is
# the needs the learner reads (hack/offline-replay --need): whole-trace by
# default, as Round nine ran it; best or sequential take about 4 more minutes
# of CPU a cell.
set -euo pipefail
# shellcheck disable=SC2206 # each list is words
seeds=(${SEEDS:-2026 7 99})
lookbacks=(${LOOKBACKS:-5 15 30})
quantiles=(${QUANTILES:-0.5 0.75 0.9 1})
margins=(${MARGINS:-0 0.2 0.4})
need=${NEED:-whole-trace}
cd "$(dirname "$0")/.."
source hack/lib/goenv.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin=$work/offline-replay
go build -o "$bin" ./hack/offline-replay
cells=0
rows=()
for seed in "${seeds[@]}"; do
	for k in "${lookbacks[@]}"; do
		for q in "${quantiles[@]}"; do
			for m in "${margins[@]}"; do
				cell="seed $seed, K $k, Q $q, M $m"
				lines=$work/lines-$seed-$k-$q-$m
				row=$("$bin" --family --goal-counts --seed="$seed" --goal-policy=reactive --policies=static-peak,reactive --need="$need" \
					--reactive-lookback="$k" --reactive-quantile="$q" --reactive-margin="$m" 2>"$lines")
				rows+=("| $cell $row")
				awk -v seed="$seed" '/meets every goal$/ {print seed, $1}' "$lines" >>"$work/met"
				awk '{print $1}' "$lines" | grep -v '^|' >>"$work/workloads" || true
				if [[ -n ${GRID_LOG:-} ]]; then
					mkdir -p "$GRID_LOG"
					cp "$lines" "$GRID_LOG/seed$seed-K$k-Q$q-M$m.txt"
				fi
			done
		done
	done
done
per_seed=$((${#lookbacks[@]} * ${#quantiles[@]} * ${#margins[@]}))
touch "$work/met"
header="| workload |"
rule="|---|"
for seed in "${seeds[@]}"; do
	header+=" seed $seed |"
	rule+="---:|"
done
echo "Cells meeting every goal of the workload, of $per_seed per seed:"
echo
echo "$header"
echo "$rule"
awk '!seen[$0]++' "$work/workloads" | while read -r w; do
	line="| $w |"
	for seed in "${seeds[@]}"; do
		n=$(awk -v s="$seed" -v w="$w" '$1 == s && $2 == w' "$work/met" | wc -l)
		line+=" $n |"
	done
	echo "$line"
done
echo
echo "| cell | SLO minutes < 90% of static's | GPU-hours > static's | bursty > 80% | unserved | scale events |"
echo "|---|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
