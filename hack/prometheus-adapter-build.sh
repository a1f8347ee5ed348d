#!/usr/bin/env bash
# Builds, once, prometheus-adapter v0.12.0 (the Go module
# sigs.k8s.io/prometheus-adapter, pinned in
# hack/bench-tools/prometheus-adapter) for make bench-list's side-by-side
# comparison, and caches it outside the repository. Prints the bin folder.
# Release binaries are never downloaded.
#
# Its module keeps prometheus-adapter's own library versions (see its
# go.mod), so its Kubernetes libraries compile apart from the main
# module's: about 1,100 packages, once. Cached, it returns at once.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
name_prefix=prometheus-adapter-build
moddir="$here/bench-tools/prometheus-adapter"
bin_name=prometheus-adapter
# shellcheck source=hack/lib/cache-build.sh
source "$here/lib/cache-build.sh"
bin=$(cache_dir)
cache_lock "$bin"

build_missing "$bin" "-s -w" prometheus-adapter=sigs.k8s.io/prometheus-adapter/cmd/adapter
echo "$bin"
