#!/usr/bin/env bash
# Fails when generated files are out of date with their sources:
#   - pkg/adapter/kedascaler/externalscaler/*.pb.go with the copy of KEDA's
#     externalscaler.proto beside them (hack/gen-kedascaler.sh regenerates
#     them into a temporary folder here, and checks the copy against
#     KEDA's module);
#   - deploy/manifests with the Helm chart (hack/manifests.sh --check,
#     which also lints the chart).
# Needs protoc (Debian 12: apt-get install -y protobuf-compiler, 3.21.12,
# the version the committed code names), protoc-gen-go and
# protoc-gen-go-grpc (built from the Go module proxy by gen-kedascaler.sh)
# and helm (built from its module by hack/helm.sh). Every one of them is
# cached after the first run.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0

# The committed code names the protoc that made it; another protoc makes
# other code (and another header), so say which to install rather than
# report a diff.
want_protoc=$(sed -n 's|^// \tprotoc  *v\(.*\)$|\1|p' "$root/pkg/adapter/kedascaler/externalscaler/externalscaler.pb.go")
if ! command -v protoc >/dev/null; then
  echo "verify-generated: protoc not found: apt-get install -y protobuf-compiler (protoc $want_protoc made the committed code)" >&2
  exit 1
fi
have_protoc=$(protoc --version | sed -n 's/^libprotoc //p')
if [[ "$have_protoc" != "$want_protoc" && "$have_protoc" != "${want_protoc#3.}" ]]; then
  echo "verify-generated: protoc $have_protoc here, but protoc $want_protoc made the committed code: install that one (Debian 12's protobuf-compiler)" >&2
  exit 1
fi

"$root/hack/gen-kedascaler.sh" "$tmp/externalscaler" >/dev/null
for f in "$tmp"/externalscaler/*.pb.go; do
  committed="$root/pkg/adapter/kedascaler/externalscaler/$(basename "$f")"
  if ! diff -u "$committed" "$f"; then
    echo "verify-generated: ${committed#"$root"/} is out of date with externalscaler.proto: run hack/gen-kedascaler.sh and commit the result" >&2
    failed=1
  fi
done
extra=$(comm -23 <(cd "$root/pkg/adapter/kedascaler/externalscaler" && ls -- *.pb.go) <(cd "$tmp/externalscaler" && ls -- *.pb.go))
if [[ -n "$extra" ]]; then
  echo "verify-generated: pkg/adapter/kedascaler/externalscaler holds generated files the proto no longer makes: $extra" >&2
  failed=1
fi

"$root/hack/manifests.sh" --check || failed=1

if [[ $failed -ne 0 ]]; then
  exit 1
fi
echo "verify-generated: generated code and manifests are current"
