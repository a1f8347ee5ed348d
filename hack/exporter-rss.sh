#!/usr/bin/env bash
# exporter-rss.sh measures the exporter's resident memory under scrape load.
#
# Usage: hack/exporter-rss.sh [duration-seconds]   (default 300)
#
# It builds cmd/exporter, runs it with 8 simulated GPUs and no pod
# attribution on a free 127.0.0.1 port, scrapes /metrics once per second for
# the duration, samples VmRSS from /proc/PID/status every 10 s, and prints the
# peak and final resident set size in MiB. Linux only (reads /proc).
set -euo pipefail

duration="${1:-300}"
if ! [[ "$duration" =~ ^[0-9]+$ ]] || [ "$duration" -lt 1 ]; then
	echo "usage: $0 [duration-seconds]" >&2
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
"$work/exporter" --backend=sim --sim-gpus=8 --pod-resources-socket= \
	--web.listen-address=127.0.0.1:0 --hostname=rss-bench 2>"$work/log" &
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
		series="$(grep -c '^DCGM_FI_' <<<"$body" || true)"
	fi
	if ((s % 10 == 0)) || ((s == duration - 1)); then
		final="$(rss_kib)"
		((final > peak)) && peak=$final
		echo "t=${s}s VmRSS=$(mib "$final") MiB" >&2
	fi
	sleep 1
done

echo "scrapes=${duration} failed=${failures} DCGM series per scrape=${series}"
echo "peak RSS:  $(mib "$peak") MiB"
echo "final RSS: $(mib "$final") MiB (anonymous $(mib "$(rss_kib RssAnon)") MiB, file-backed $(mib "$(rss_kib RssFile)") MiB)"
