#!/usr/bin/env bash
# Builds, once, KEDA's operator and metrics API server (the Go module
# github.com/kedacore/keda/v2, pinned in hack/tools/keda) for the
# end-to-end suite's KEDA scenario (test/keda), and caches them outside the
# repository. Prints the bin folder. Release binaries are never downloaded.
#
# Cold build time (empty Go build cache): 27.6 minutes of CPU (20.8 user,
# 6.9 system) for both binaries (3,712 packages), which on two idle cores
# is about 15 minutes of wall time; on two cores shared with four other
# builds (load average 12-16) it took 62 minutes. .ci/run starts it in the
# background beside the first tests.
# Later runs return at once.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
keda_version=v2.21.0
cache=${GPUSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuscale}
bin="$cache/bin/keda-$keda_version"
name_prefix=keda-build
moddir="$here/tools/keda"
build_env=""
# shellcheck source=hack/lib/cache-build.sh
source "$here/lib/cache-build.sh"
cache_lock

# The same flags and environment on every machine and from every caller
# (make exports CGO_CFLAGS for go-nvml), so the Go build cache is shared.
unset CGO_CFLAGS
ldflags="-s -w"

build keda-operator github.com/kedacore/keda/v2/cmd/operator
build keda-adapter github.com/kedacore/keda/v2/cmd/adapter
echo "$bin"
