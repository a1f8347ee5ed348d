#!/usr/bin/env bash
# exporter-rss.sh measures the exporter's resident memory under scrape load.
#
# Usage: hack/exporter-rss.sh [duration-seconds]   (default 300)
#        EXPORTER_ARGS="--dcgm-schema=4.10" SCRAPERS=200 hack/exporter-rss.sh 120
#
# It builds cmd/exporter, runs it with 8 simulated GPUs and no pod
# attribution on a free 127.0.0.1 port, scrapes /metrics once per second for
# the duration, samples VmRSS from /proc/PID/status every 10 s, and prints the
# peak and final resident set size in MiB. EXPORTER_ARGS (split on spaces) are
# added to the exporter's flags; SCRAPERS (default 1) scrapers ask at once each
# second, and a refused or failed one counts as failed. Linux only (reads /proc).
set -euo pipefail

duration="${1:-300}"
scrapers="${SCRAPERS:-1}"
if ! [[ "$duration" =~ ^[0-9]+$ ]] || [ "$duration" -lt 1 ] || ! [[ "$scrapers" =~ ^[0-9]+$ ]] || [ "$scrapers" -lt 1 ]; then
	echo "usage: [SCRAPERS=n] [EXPORTER_ARGS=flags] $0 [duration-seconds]" >&2
	exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/exporter-rss.XXXXXX")"
pid=""
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

echo "building exporter..." >&2
(cd "$root" && CGO_CFLAGS="${CGO_CFLAGS:--Wno-deprecated-declarations}" go build -tags nomsgpack -o "$work/exporter" ./cmd/exporter)

# Port 0 lets the kernel pick a free port; the exporter logs the bound address.
# shellcheck disable=SC2086 # EXPORTER_ARGS is a list of flags
"$work/exporter" --backend=sim --sim-gpus=8 --pod-resources-socket= \
	--web.listen-address=127.0.0.1:0 --hostname=rss-bench ${EXPORTER_ARGS:-} 2>"$work/log" &
pid=$!

addr=""
for _ in $(seq 1 100); do
	addr="$(sed -n 's/.*"msg":"exporter listening".*"address":"\([^"]*\)".*/\1/p' "$work/log" | head -n1)"
	[ -n "$addr" ] && break
	if ! kill -0 "$pid" 2>/dev/null; then
		cat "$work/log" >&2
		echo "exporter exited before listening" >&2
		exit 1
	fi
	sleep 0.1
done
if [ -z "$addr" ]; then
	cat "$work/log" >&2
	echo "exporter did not report its listen address" >&2
	exit 1
fi
echo "exporter pid $pid listening on $addr; scraping for ${duration}s" >&2

rss_kib() { awk -v f="${1:-VmRSS}" '$1 == f":" {print $2}' "/proc/$pid/status"; }
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }

peak=0
final=0
series=0
failures=0
for ((s = 0; s < duration; s++)); do
	if ! body="$(curl -fsS --max-time 5 "http://$addr/metrics")"; then
		failures=$((failures + 1))
	else
		series="$(grep -c '^DCGM_' <<<"$body" || true)"
	fi
	if ((scrapers > 1)); then
		pids=()
		for ((i = 1; i < scrapers; i++)); do
			curl -fsS --compressed --max-time 5 -o /dev/null "http://$addr/metrics" 2>/dev/null || echo x >>"$work/failed" &
			pids+=($!)
		done
		wait "${pids[@]}" # not the exporter
	fi
	if ((s % 10 == 0)) || ((s == duration - 1)); then
		final="$(rss_kib)"
		((final > peak)) && peak=$final
		echo "t=${s}s VmRSS=$(mib "$final") MiB" >&2
	fi
	sleep 1
done

[ -f "$work/failed" ] && failures=$((failures + $(wc -l <"$work/failed")))
echo "scrapes=$((duration * scrapers)) failed=${failures} DCGM series per scrape=${series}"
echo "peak RSS:  $(mib "$peak") MiB"
echo "final RSS: $(mib "$final") MiB (anonymous $(mib "$(rss_kib RssAnon)") MiB, file-backed $(mib "$(rss_kib RssFile)") MiB)"
