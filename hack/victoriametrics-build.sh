#!/usr/bin/env bash
# Builds, once, VictoriaMetrics' single-node server (the Go module
# github.com/VictoriaMetrics/VictoriaMetrics, pinned in
# hack/bench-tools/victoriametrics) that make bench-list and the end-to-end
# PromQL test run beside Prometheus, and caches it outside the repository.
# Prints the bin folder. Release binaries are never downloaded.
#
# A module of its own, not hack/tools: VictoriaMetrics pins its own
# prometheus/prometheus and cloud SDKs, which the control plane's module
# graph should not carry, and no CI build needs it. Cached, it returns at
# once.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
name_prefix=victoriametrics-build
moddir="$here/bench-tools/victoriametrics"
bin_name=victoriametrics
# shellcheck source=hack/lib/cache-build.sh
source "$here/lib/cache-build.sh"
bin=$(cache_dir)
cache_lock "$bin"

version=$(cd "$moddir" && go list -m -f '{{.Version}}' github.com/VictoriaMetrics/VictoriaMetrics)
build_missing "$bin" "-s -w -X github.com/VictoriaMetrics/VictoriaMetrics/lib/buildinfo.Version=victoria-metrics-$version" \
  victoria-metrics=github.com/VictoriaMetrics/VictoriaMetrics/app/victoria-metrics
echo "$bin"
