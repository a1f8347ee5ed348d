#!/usr/bin/env bash
# Runs the pinned staticcheck (honnef.co/go/tools in hack/tools, built with
# the other tools and cached) with the given arguments. Its default set of
# checks applies; there is no staticcheck.conf.
set -euo pipefail
bin=$("$(dirname "$0")/tools-build.sh")
exec "$bin/staticcheck" "$@"
