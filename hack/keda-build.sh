#!/usr/bin/env bash
# Builds, once, KEDA's operator and metrics API server (the Go module
# github.com/kedacore/keda/v2, pinned in hack/tools/keda) for the
# end-to-end suite's KEDA scenario (test/keda), and caches them outside the
# repository. Prints the bin folder. Release binaries are never downloaded.
#
# KEDA links every one of its scalers' cloud SDKs: 3,712 packages. Built in
# the tests' configuration (hack/lib/goenv.sh), against the Kubernetes
# libraries the main module uses, about 1,300 of them are the packages
# hack/tools-build.sh has already compiled; .ci/run starts this build
# after that one, so they are compiled once. Cached, it returns at once.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
name_prefix=keda-build
moddir="$here/tools/keda"
bin_name=keda
# shellcheck source=hack/lib/cache-build.sh
source "$here/lib/cache-build.sh"
bin=$(cache_dir)
cache_lock "$bin"

build_missing "$bin" "-s -w" \
  keda-operator=github.com/kedacore/keda/v2/cmd/operator \
  keda-adapter=github.com/kedacore/keda/v2/cmd/adapter
echo "$bin"
