#!/usr/bin/env bash
# Prints the path of the pinned Helm CLI (helm.sh/helm/v4 in hack/tools; Helm
# is not packaged in Debian and release binaries are never downloaded),
# building it with the other tools first when it is not cached. Its default
# Kubernetes version, which `helm template` assumes, is the minor of the
# client-go it is built with (v0.37: Kubernetes 1.37), as a release build's.
set -euo pipefail
bin=$("$(dirname "$0")/tools-build.sh")
echo "$bin/helm"
