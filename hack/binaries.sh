#!/usr/bin/env bash
# Builds the binaries the images hold into _output/bin/linux_<arch>/, with
# -trimpath and the version stamped in (pkg/buildinfo).
#
#   hack/binaries.sh [arch]   arch defaults to this machine's (go env GOARCH)
#
# The adapter and inferencesim are static (CGO_ENABLED=0). The exporter is
# built with cgo: go-nvml loads libnvidia-ml.so with dlopen, so it links
# against glibc; for another arch set CC to a cross compiler (the release
# workflow uses aarch64-linux-gnu-gcc).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
arch=${1:-$(go env GOARCH)}
out=_output/bin/linux_$arch
version=$(hack/version.sh)
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
branch=$(git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)
# The commit's time, not the clock's: the same commit builds the same bytes.
date=$(git log -1 --format=%cI 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)
pkg=github.com/prometheus/common/version
ldflags="-s -w -X $pkg.Version=$version -X $pkg.Revision=$revision -X $pkg.Branch=$branch -X $pkg.BuildDate=$date -X $pkg.BuildUser=gpuscale"
mkdir -p "$out"
# As the Makefile: go-nvml's NVML 13 headers' deprecations are noise.
export CGO_CFLAGS=${CGO_CFLAGS:--Wno-deprecated-declarations}
# nomsgpack drops gin's msgpack codec (6 MiB less resident memory).
build() { # cgo name
  CGO_ENABLED=$1 GOOS=linux GOARCH=$arch go build -trimpath -tags nomsgpack -ldflags "$ldflags" -o "$out/$2" "./cmd/$2"
}
build 0 adapter
build 0 inferencesim
build 1 exporter
echo "binaries: $out (version $version)"
