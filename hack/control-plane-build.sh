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
name_prefix=control-plane-build
moddir="$here/tools"
build_env="CGO_ENABLED=0"
# shellcheck source=hack/lib/cache-build.sh
source "$here/lib/cache-build.sh"
cache_lock

ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version"

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
