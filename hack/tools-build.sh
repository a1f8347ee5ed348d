#!/usr/bin/env bash
# Builds, once, every pinned binary of the tools module (hack/tools): the
# Kubernetes control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl), etcd and kwok that the end-to-end tests and
# `make demo` run, and the helm and staticcheck CLIs that CI runs. Caches
# them outside the repository and prints their folder. Release binaries are
# never downloaded.
#
# One go build compiles them all in the build configuration the tests use
# (hack/lib/goenv.sh), with the library versions the main module uses
# (test/deps checks that they agree), so the Kubernetes libraries compiled
# here are the ones `make unit` and `make lint` link: they are compiled
# once. Cold, on two idle cores, this is the longest build CI runs
# (docs/architecture.md, "Checks"); cached, it returns at once.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
name_prefix=tools-build
moddir="$here/tools"
bin_name=tools
# shellcheck source=hack/lib/cache-build.sh
source "$here/lib/cache-build.sh"
bin=$(cache_dir)
cache_lock "$bin"

version_of() { (cd "$moddir" && go list -m -f '{{.Version}}' "$1"); }
k8s_version=$(version_of k8s.io/kubernetes)
helm_version=$(version_of helm.sh/helm/v4)
# -X for a variable a binary lacks is ignored, so one set serves them all.
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version \
 -X k8s.io/component-base/version.gitMajor=$(cut -d. -f1 <<<"${k8s_version#v}") \
 -X k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"$k8s_version") \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version \
 -X helm.sh/helm/v4/internal/version.version=$helm_version \
 -X helm.sh/helm/v4/internal/version.gitTreeState=clean"

build_missing "$bin" "$ldflags" \
  etcd=go.etcd.io/etcd/server/v3 \
  kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
  kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
  kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler \
  kubectl=k8s.io/kubernetes/cmd/kubectl \
  kwok=sigs.k8s.io/kwok/cmd/kwok \
  helm=helm.sh/helm/v4/cmd/helm \
  staticcheck=honnef.co/go/tools/cmd/staticcheck
echo "$bin"
