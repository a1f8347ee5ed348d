#!/usr/bin/env bash
# Prints the directory of the Prometheus Operator's CRDs (ServiceMonitor,
# PodMonitor, PrometheusRule, ...) at a pinned release, fetched once through
# the Go module proxy with the operator's module (its example/ directory
# ships them), so the end-to-end suite can validate the chart's monitoring
# objects against the real schemas.
set -euo pipefail

version=v0.85.0
dir=$(go mod download -json "github.com/prometheus-operator/prometheus-operator@$version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
crds="$dir/example/prometheus-operator-crd"
if [[ ! -f "$crds/monitoring.coreos.com_servicemonitors.yaml" ]]; then
  echo "prometheus-operator-crds: no CRDs in $crds" >&2
  exit 1
fi
echo "$crds"
