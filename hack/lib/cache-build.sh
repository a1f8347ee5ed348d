# Sourced by hack/tools-build.sh and hack/keda-build.sh: binaries built
# once from a tools module into a cache folder, one build at a time, with a
# long build's progress shown.
#
# The caller sets: name_prefix (its log prefix), moddir (the tools module)
# and bin_name (the cache folder's name before its key), and may set
# key_files (more files the binaries are made from). cache_dir then names
# the folder: the key hashes what the binaries are made from (the module's
# go.mod and go.sum, key_files, the build configuration, the Go version and
# this file), so a change to any of them builds again, in a new folder.

here=${here:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
# shellcheck source=hack/lib/goenv.sh
source "$here/lib/goenv.sh"

log() { echo "$name_prefix: $*" >&2; }

# cache_dir prints the cache folder of the binaries built from moddir.
cache_dir() {
  local cache key
  cache=${GPUSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuscale}
  key=$( { cat "$moddir/go.mod" "$moddir/go.sum" "$here/lib/goenv.sh" "$here/lib/cache-build.sh" ${key_files[@]+"${key_files[@]}"}
           go version; echo "$CGO_ENABLED $GOFLAGS"; } | sha256sum | cut -c1-12)
  echo "$cache/bin/$bin_name-$key"
}

# cache_lock creates the cache folder and holds its lock until the script
# exits: .ci/run starts the builds in the background, and make's targets
# wait here for them instead of building the same binaries a second time.
cache_lock() { # folder
  mkdir -p "$1"
  exec 9>"$1/.build.lock"
  flock 9
}

# progress shows a long build's progress on stderr: go build -v names each
# package it compiles; every 250th is counted, and the whole output is kept
# in a log shown if the build fails.
progress() { # logfile
  awk -v prefix="$name_prefix" -v logf="$1" '{ print > logf; if (++n % 250 == 0) printf "%s:   %d packages compiled\n", prefix, n > "/dev/stderr" }'
}

# build_missing builds, in one go build, every binary of the given
# name=package pairs that bin lacks, with the caller's build_flags if set. One invocation lets the go command
# link one binary while it compiles the next, so both cores stay busy.
build_missing() { # bin ldflags name=package...
  local bin=$1 ldflags=$2 pair name pkg want=() pkgs=()
  shift 2
  for pair in "$@"; do
    name=${pair%%=*} pkg=${pair#*=}
    [[ -x "$bin/$name" ]] && continue
    want+=("$pair") pkgs+=("$pkg")
  done
  ((${#pkgs[@]})) || return 0
  log "building ${want[*]} (cached afterwards in $bin)"
  local start=$SECONDS out="$bin/.tmp" buildlog="$bin/build.log"
  rm -rf "$out" && mkdir -p "$out"
  if ! (cd "$moddir" && go build -v ${build_flags[@]+"${build_flags[@]}"} -ldflags "$ldflags" -o "$out/" "${pkgs[@]}" 2>&1) | progress "$buildlog"; then
    log "building failed; the end of $buildlog:"
    tail -40 "$buildlog" >&2
    return 1
  fi
  for pair in "${want[@]}"; do
    name=${pair%%=*} pkg=${pair#*=}
    # go build names a binary after its package path's last element, or the
    # one before a major-version suffix (go.etcd.io/etcd/server/v3: server).
    local base=${pkg##*/}
    [[ $base =~ ^v[0-9]+$ ]] && base=$(basename "$(dirname "$pkg")")
    mv "$out/$base" "$bin/$name"
  done
  rm -rf "$out" "$buildlog"
  log "built ${want[*]%%=*} in $((SECONDS - start))s"
}
