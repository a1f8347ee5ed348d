#!/usr/bin/env bash
# Builds, once, KEDA's operator and metrics API server (the Go module
# github.com/kedacore/keda/v2, pinned in hack/tools/keda) for the
# end-to-end suite's KEDA scenario (test/keda), and caches them outside the
# repository. Prints the bin folder. Release binaries are never downloaded.
#
# KEDA compiles all of its scalers into one package, so a plain build links
# every scaler's client and cloud SDK: 3,712 packages. The build here is of
# a copy of KEDA's released source whose scaler registry keeps only the
# trigger types below, the ones that need no cloud SDK (hack/keda-trim says
# exactly what changes: buildScaler's switch and the scaler files nothing
# calls any more). The operator, the metrics API server, the scale handler
# and the external scalers' gRPC client are KEDA's code as released; a
# trigger of any other type gets KEDA's own "no scaler found" error. That
# leaves about 2,000 packages, about 1,200 of them the Kubernetes libraries
# and others hack/tools-build.sh has already compiled in the same
# configuration (hack/lib/goenv.sh, the main module's versions), so about
# 800 compile here (docs/architecture.md, "Checks"). Cached, it returns at
# once.
set -euo pipefail

# gpuscale's scaler is external and external-push; the rest are KEDA's
# scalers that link no SDK beyond what KEDA's core already does.
triggers=external,external-push,cpu,memory,cron,kubernetes-workload,kubernetes-resource,metrics-api,prometheus

here=$(cd "$(dirname "$0")" && pwd)
name_prefix=keda-build
moddir="$here/tools/keda"
bin_name=keda
key_files=("$here/keda-build.sh" "$here/keda-trim/main.go" "$here/keda-trim/trim.go")
# shellcheck source=hack/lib/cache-build.sh
source "$here/lib/cache-build.sh"
bin=$(cache_dir)
cache_lock "$bin"

if [[ ! -x "$bin/keda-operator" || ! -x "$bin/keda-adapter" ]]; then
  keda_dir=$(cd "$moddir" && go mod download -json github.com/kedacore/keda/v2 | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -n "$keda_dir" ]] || { log "go mod download gave no folder for KEDA's module"; exit 1; }
  rm -rf "$bin/src"
  (cd "$here/.." && go run ./hack/keda-trim -src="$keda_dir" -out="$bin/src" -triggers="$triggers") >&2
  # The tools module with KEDA replaced by the trimmed copy, in a go.mod of
  # its own: hack/tools/keda stays as committed.
  cp "$moddir/go.mod" "$bin/go.mod"
  cp "$moddir/go.sum" "$bin/go.sum"
  go mod edit -modfile="$bin/go.mod" -replace=github.com/kedacore/keda/v2="$bin/src"
  build_flags=(-modfile="$bin/go.mod")
fi

build_missing "$bin" "-s -w" \
  keda-operator=github.com/kedacore/keda/v2/cmd/operator \
  keda-adapter=github.com/kedacore/keda/v2/cmd/adapter
echo "$bin"
