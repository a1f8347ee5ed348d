#!/usr/bin/env bash
# Builds, once, the pinned Kubernetes control plane (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl), etcd and kwok from Go
# modules, and caches them outside the repository. Prints the bin folder.
# The first build takes about 20 minutes of CPU on two cores; later runs
# return at once. Release binaries are never downloaded.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
k8s_version=v1.37.2
etcd_version=v3.6.16
kwok_version=v0.8.0
cache=${GPUSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuscale}
bin="$cache/bin/k8s-$k8s_version-etcd-$etcd_version-kwok-$kwok_version"
mkdir -p "$bin"
# One build at a time per cache folder: .ci/run starts this in the
# background, and make's e2e target waits here for it instead of building
# the same binaries a second time.
exec 9>"$bin/.build.lock"
flock 9

log() { echo "control-plane-build: $*" >&2; }

ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version"

# progress shows a long build's progress on stderr: go build -v names each
# package it compiles; every 100th is counted, and the whole output is kept
# in a log shown if the build fails.
progress() { # name logfile
  awk -v name="$1" -v logf="$2" '{ print > logf; if (++n % 100 == 0) printf "control-plane-build:   %s: %d packages compiled\n", name, n > "/dev/stderr" }'
}

build() { # name package
  local name=$1 pkg=$2
  if [[ -x "$bin/$name" ]]; then return; fi
  log "building $name from $pkg (cached afterwards in $bin)"
  local start=$SECONDS buildlog="$bin/$name.build.log"
  if ! (cd "$here/tools" && CGO_ENABLED=0 go build -v -trimpath -ldflags "$ldflags" -o "$bin/$name.tmp" "$pkg" 2>&1) | progress "$name" "$buildlog"; then
    log "building $name failed; the end of $buildlog:"
    tail -40 "$buildlog" >&2
    return 1
  fi
  rm -f "$buildlog"
  mv "$bin/$name.tmp" "$bin/$name"
  log "built $name in $((SECONDS - start))s"
}

build etcd go.etcd.io/etcd/server/v3
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
build kubectl k8s.io/kubernetes/cmd/kubectl
if [[ ! -x "$bin/kwok" ]]; then
  log "building kwok $kwok_version"
  if ! GOBIN="$bin" CGO_ENABLED=0 go install -v -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$kwok_version" 2>&1 | progress kwok "$bin/kwok.build.log"; then
    log "building kwok failed; the end of $bin/kwok.build.log:"
    tail -40 "$bin/kwok.build.log" >&2
    exit 1
  fi
  rm -f "$bin/kwok.build.log"
fi
echo "$bin"
