#!/usr/bin/env bash
# `make images`: builds the adapter, exporter and inferencesim images from
# Dockerfile with buildah, on a machine with no container registry.
#
# Nothing is pulled from a registry. The two base images are built here
# from Debian packages (fetched by apt, unpacked by dpkg-deb) and cached in
# ~/.cache/gpuscale/images keyed by the packages' versions and this script:
#   localhost/gpuscale-base-static  CA certificates, /etc/passwd with root and
#                                   nonroot (65532), /tmp
#   localhost/gpuscale-base-glibc   the same plus Debian's libc6
# The images land in the local podman store as localhost/gpuscale-<name>:<version>
# and as OCI archives in _output/images/.
#
# Needs buildah, podman, runc and apt (Debian 12: apt-get install podman
# buildah runc uidmap). CONTAINERS_CONF points podman and buildah at
# hack/containers.conf (see why there).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CONTAINERS_CONF=${CONTAINERS_CONF:-$root/hack/containers.conf}
for tool in buildah podman apt-get dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "images: $tool not found (Debian: apt-get install podman buildah runc uidmap)" >&2; exit 1; }
done

arch=$(go env GOARCH)
version=$(hack/version.sh)
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
epoch=$(git log -1 --format=%ct 2>/dev/null || date +%s)
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
cache=${GPUSCALE_CACHE:-$HOME/.cache/gpuscale}/images
out=_output/images
mkdir -p "$cache" "$out"

# base_images makes (or finds cached) the two base images and sets
# static_base and glibc_base to their names.
base_images() {
  local uris key tmp
  if ! uris=$(cd "$cache" && apt-get download --print-uris libc6 ca-certificates 2>&1); then
    echo "images: apt cannot resolve libc6 and ca-certificates (run apt-get update): $uris" >&2
    return 1
  fi
  key=$( { echo "$uris" | awk '{print $2, $4}'; sed -n '/^base_images()/,/^}/p' "$0"; } | sha256sum | cut -c1-16)
  static_base=localhost/gpuscale-base-static:$key
  glibc_base=localhost/gpuscale-base-glibc:$key
  if podman image exists "$static_base" && podman image exists "$glibc_base"; then
    echo "images: base images $key cached"
    return 0
  fi
  if [[ ! -f "$cache/base-static-$key.tar" || ! -f "$cache/base-glibc-$key.tar" ]]; then
    echo "images: building base rootfs $key from Debian packages"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' RETURN
    # As root, apt warns that it downloads outside its _apt sandbox: noise.
    if ! (cd "$tmp" && apt-get download libc6 ca-certificates >"$tmp/apt.log" 2>&1); then
      cat "$tmp/apt.log" >&2
      return 1
    fi
    # apt-get download verified each file against the signed Release's hash.
    dpkg-deb -x "$tmp"/ca-certificates_*.deb "$tmp/ca"
    local s="$tmp/static" g="$tmp/glibc"
    mkdir -p "$s/etc/ssl/certs" "$s/tmp" "$s/home/nonroot" "$s/usr/local/bin"
    # What update-ca-certificates would write: every Mozilla root, sorted.
    find "$tmp/ca/usr/share/ca-certificates/mozilla" -name '*.crt' | LC_ALL=C sort | xargs cat >"$s/etc/ssl/certs/ca-certificates.crt"
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$s/etc/passwd"
    printf 'root:x:0:\nnonroot:x:65532:\n' >"$s/etc/group"
    chmod 1777 "$s/tmp"
    chmod 0755 "$s/home/nonroot"
    cp -a "$s" "$g"
    dpkg-deb -x "$tmp"/libc6_*.deb "$g"
    # Neither the exporter nor NVML converts character sets or reads docs.
    rm -rf "$g/usr/share/doc" "$g/usr/share/lintian" "$g"/usr/lib/*/gconv
    for name in static glibc; do
      tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@0" \
        -C "$tmp/$name" -cf "$cache/base-$name-$key.tar.tmp" .
      mv "$cache/base-$name-$key.tar.tmp" "$cache/base-$name-$key.tar"
    done
  fi
  podman import --quiet "$cache/base-static-$key.tar" "$static_base" >/dev/null
  podman import --quiet "$cache/base-glibc-$key.tar" "$glibc_base" >/dev/null
  # Dockerfile's defaults, for a plain `buildah bud --target adapter .`.
  podman tag "$static_base" localhost/gpuscale-base-static:latest
  podman tag "$glibc_base" localhost/gpuscale-base-glibc:latest
  echo "images: base images $key imported"
}

base_images
hack/binaries.sh "$arch"
for name in adapter exporter inferencesim; do
  image=localhost/gpuscale-$name:$version
  buildah bud --quiet --pull=never --target "$name" --timestamp "$epoch" \
    --build-arg STATIC_BASE="$static_base" --build-arg GLIBC_BASE="$glibc_base" \
    --build-arg TARGETOS=linux --build-arg TARGETARCH="$arch" \
    --build-arg VERSION="$version" --build-arg REVISION="$revision" --build-arg CREATED="$created" \
    -t "$image" -f Dockerfile . >/dev/null
  archive=$out/gpuscale-${name}_${version}_linux_${arch}.oci.tar
  rm -f "$archive"
  podman save --quiet --format oci-archive -o "$archive" "$image"
  printf 'images: %-45s %s\n' "$image" "$archive"
done
