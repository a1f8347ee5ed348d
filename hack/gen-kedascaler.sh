#!/usr/bin/env bash
# Regenerates pkg/adapter/kedascaler/externalscaler's Go code from KEDA's
# externalscaler.proto (copied from github.com/kedacore/keda/v2@v2.21.0,
# Apache-2.0; the copy is checked against the module here). Needs protoc
# (Debian: apt-get install -y protobuf-compiler); protoc-gen-go and
# protoc-gen-go-grpc are built from the Go module proxy, at the versions
# below (protoc-gen-go at go.mod's google.golang.org/protobuf), and cached.
#
#   hack/gen-kedascaler.sh        regenerate pkg/adapter/kedascaler/externalscaler
#   hack/gen-kedascaler.sh DIR    write the generated files into DIR instead
#                                 (hack/verify-generated.sh diffs them)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
keda_version=v2.21.0
protoc_gen_go_grpc_version=v1.6.2
protobuf_version=$(cd "$root" && go list -m -f '{{.Version}}' google.golang.org/protobuf)
cache=${GPUSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuscale}
plugins="$cache/bin/protoc-plugins-go-$protobuf_version-grpc-$protoc_gen_go_grpc_version"
src="$root/pkg/adapter/kedascaler/externalscaler"
proto="$src/externalscaler.proto"
out=${1:-$src}
mkdir -p "$out"

command -v protoc >/dev/null || { echo "gen-kedascaler: protoc not found (apt-get install -y protobuf-compiler)" >&2; exit 1; }
mkdir -p "$plugins"
[[ -x "$plugins/protoc-gen-go" ]] || GOBIN="$plugins" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$protobuf_version"
[[ -x "$plugins/protoc-gen-go-grpc" ]] || GOBIN="$plugins" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$protoc_gen_go_grpc_version"

# The copy is KEDA's file under a comment naming its origin.
upstream=$(cd "$root/hack/tools/keda" && go mod download -json "github.com/kedacore/keda/v2@$keda_version" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
if ! diff <(sed '1,/^$/d' "$proto") "$upstream/pkg/scalers/externalscaler/externalscaler.proto" >/dev/null; then
  echo "gen-kedascaler: $proto differs from KEDA $keda_version's externalscaler.proto" >&2
  exit 1
fi

pkg=github.com/gpuscale/gpuscale/pkg/adapter/kedascaler/externalscaler
PATH="$plugins:$PATH" protoc -I "$src" \
  --go_out="$out" --go_opt=paths=source_relative --go_opt="Mexternalscaler.proto=$pkg;externalscaler" \
  --go-grpc_out="$out" --go-grpc_opt=paths=source_relative --go-grpc_opt="Mexternalscaler.proto=$pkg;externalscaler" \
  externalscaler.proto
echo "gen-kedascaler: generated $(cd "$out" && ls -- *.pb.go | tr '\n' ' ')in $out"
