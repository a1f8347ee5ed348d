#!/usr/bin/env bash
# Builds, once, the pinned Helm CLI from its Go module and caches it outside
# the repository (Helm is not packaged in Debian, and release binaries are
# never downloaded). Prints the binary's path.
set -euo pipefail

helm_version=v3.22.0
# The Kubernetes minor of the client-go helm v3.22.0 is built with: the
# version `helm template` assumes, as a release build would.
k8s_minor=37
cache=${GPUSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuscale}
bin="$cache/bin/helm-$helm_version"

if [[ ! -x "$bin/helm" ]]; then
  echo "helm-build: building helm $helm_version (cached afterwards in $bin)" >&2
  mkdir -p "$bin"
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in pkg/chartutil pkg/lint/rules; do
    ldflags="$ldflags -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$k8s_minor"
  done
  GOBIN="$bin.tmp" CGO_ENABLED=0 go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$helm_version"
  mv "$bin.tmp/helm" "$bin/helm" && rmdir "$bin.tmp"
fi
echo "$bin/helm"
