#!/usr/bin/env bash
# Builds, once, the pinned staticcheck from its Go module, caches it outside
# the repository (as hack/helm.sh does Helm) and runs it with the given
# arguments. The pin is staticcheck 2026.2.2, which supports Go 1.26.
# Its default set of checks applies (all but the ST1000-style ones its
# defaults leave out); there is no staticcheck.conf.
set -euo pipefail

version=v0.8.2
cache=${GPUSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuscale}
bin="$cache/bin/staticcheck-$version"

if [[ ! -x "$bin/staticcheck" ]]; then
  echo "staticcheck: building staticcheck $version (cached afterwards in $bin)" >&2
  rm -rf "$bin.tmp" && mkdir -p "$bin.tmp"
  GOBIN="$bin.tmp" CGO_ENABLED=0 go install -trimpath "honnef.co/go/tools/cmd/staticcheck@$version"
  mkdir -p "$bin" && mv "$bin.tmp/staticcheck" "$bin/staticcheck" && rmdir "$bin.tmp"
fi
exec "$bin/staticcheck" "$@"
