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
mkdir -p "$bin"
# One build at a time per cache folder: .ci/run starts this in the
# background, and make's e2e target waits here for it instead of building
# the same binaries a second time.
exec 9>"$bin/.build.lock"
flock 9

log() { echo "keda-build: $*" >&2; }

# The same flags and environment on every machine and from every caller
# (make exports CGO_CFLAGS for go-nvml), so the Go build cache is shared.
unset CGO_CFLAGS
ldflags="-s -w"

# progress shows a long build's progress on stderr: go build -v names each
# package it compiles; every 100th is counted, and the whole output is kept
# in a log shown if the build fails.
progress() { # name logfile
  awk -v name="$1" -v logf="$2" '{ print > logf; if (++n % 100 == 0) printf "keda-build:   %s: %d packages compiled\n", name, n > "/dev/stderr" }'
}

build() { # name package
  local name=$1 pkg=$2
  if [[ -x "$bin/$name" ]]; then return; fi
  log "building $name from $pkg@$keda_version (cached afterwards in $bin)"
  local start=$SECONDS buildlog="$bin/$name.build.log"
  if ! (cd "$here/tools/keda" && go build -v -trimpath -ldflags "$ldflags" -o "$bin/$name.tmp" "$pkg" 2>&1) | progress "$name" "$buildlog"; then
    log "building $name failed; the end of $buildlog:"
    tail -40 "$buildlog" >&2
    return 1
  fi
  rm -f "$buildlog"
  mv "$bin/$name.tmp" "$bin/$name"
  log "built $name in $((SECONDS - start))s"
}

build keda-operator github.com/kedacore/keda/v2/cmd/operator
build keda-adapter github.com/kedacore/keda/v2/cmd/adapter
echo "$bin"
