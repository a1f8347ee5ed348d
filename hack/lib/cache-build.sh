# Sourced by hack/control-plane-build.sh and hack/keda-build.sh: binaries
# built once from a tools module into a cache folder, one build at a time,
# with a long build's progress shown.
#
# The caller sets: name_prefix (its log prefix), bin (the cache folder),
# moddir (the tools module to build in), ldflags, and build_env (variables
# for go build, e.g. CGO_ENABLED=0; may be empty).

log() { echo "$name_prefix: $*" >&2; }

# cache_lock creates the cache folder and holds its lock until the script
# exits: .ci/run starts the builds in the background, and make's e2e target
# waits here for them instead of building the same binaries a second time.
cache_lock() {
  mkdir -p "$bin"
  exec 9>"$bin/.build.lock"
  flock 9
}

# progress shows a long build's progress on stderr: go build -v names each
# package it compiles; every 100th is counted, and the whole output is kept
# in a log shown if the build fails.
progress() { # name logfile
  awk -v prefix="$name_prefix" -v name="$1" -v logf="$2" '{ print > logf; if (++n % 100 == 0) printf "%s:   %s: %d packages compiled\n", prefix, name, n > "/dev/stderr" }'
}

build() { # name package
  local name=$1 pkg=$2
  if [[ -x "$bin/$name" ]]; then return; fi
  log "building $name from $pkg (cached afterwards in $bin)"
  local start=$SECONDS buildlog="$bin/$name.build.log"
  # shellcheck disable=SC2086 # build_env is a list of VAR=value words
  if ! (cd "$moddir" && env $build_env go build -v -trimpath -ldflags "$ldflags" -o "$bin/$name.tmp" "$pkg" 2>&1) | progress "$name" "$buildlog"; then
    log "building $name failed; the end of $buildlog:"
    tail -40 "$buildlog" >&2
    return 1
  fi
  rm -f "$buildlog"
  mv "$bin/$name.tmp" "$bin/$name"
  log "built $name in $((SECONDS - start))s"
}
