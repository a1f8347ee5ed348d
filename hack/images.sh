#!/usr/bin/env bash
# `make images`: builds the adapter, exporter and inferencesim images from
# Dockerfile with buildah, for amd64 and arm64, on a machine with no
# container registry.
#
#   hack/images.sh [ARCH...]   default: $IMAGE_ARCHS, else "amd64 arm64"
#
# Nothing is pulled from a registry. The two base images are built here
# from Debian packages (fetched by apt for each architecture, unpacked by
# dpkg-deb) and cached in ~/.cache/gpuscale/images keyed by the packages'
# versions, the architecture and this script:
#   localhost/gpuscale-base-static  CA certificates, /etc/passwd with root and
#                                   nonroot (65532), /tmp
#   localhost/gpuscale-base-glibc   the same plus Debian's libc6
# The Dockerfile only copies files, so another architecture's images build
# without emulation; the arm64 exporter (cgo, for NVML's dlopen) is
# cross-compiled with Debian's aarch64-linux-gnu-gcc. Each image holds an
# SPDX SBOM (hack/sbom: the binary's module graph and the base's packages)
# at /usr/share/doc/gpuscale/sbom.spdx.json, also written beside its OCI
# archive. The images land in the local podman store as
# localhost/gpuscale-<name>:<version>-<arch> (and :<version> for this
# machine's architecture) and as OCI archives in _output/images/;
# _output/images/build-record.json records every image's ID and archive
# digest and pins its base by image ID and layer digest, with the SHA-256
# apt verified of every package in it.
#
# Needs buildah, podman, runc and apt (Debian 12: apt-get install podman
# buildah runc uidmap); as root it adds what another architecture needs
# (dpkg --add-architecture, gcc-aarch64-linux-gnu). CONTAINERS_CONF points
# podman and buildah at hack/containers.conf (see why there).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CONTAINERS_CONF=${CONTAINERS_CONF:-$root/hack/containers.conf}
for tool in buildah podman apt-get dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "images: $tool not found (Debian: apt-get install podman buildah runc uidmap)" >&2; exit 1; }
done

host_arch=$(go env GOARCH)
read -r -a archs <<<"${*:-${IMAGE_ARCHS:-amd64 arm64}}"
version=$(hack/version.sh)
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
epoch=$(git log -1 --format=%ct 2>/dev/null || date +%s)
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
cache=${GPUSCALE_CACHE:-$HOME/.cache/gpuscale}/images
out=_output/images
mkdir -p "$cache" "$out"

# arch_tools makes sure apt and the compiler can build for arch: Debian's
# packages of that architecture, and a C cross compiler for the exporter.
arch_tools() { # arch
  local arch=$1
  [[ $arch == "$(dpkg --print-architecture)" ]] && return 0
  if ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
    [[ $(id -u) == 0 ]] || { echo "images: run as root, or: dpkg --add-architecture $arch && apt-get update" >&2; return 1; }
    echo "images: adding Debian's $arch packages to apt (dpkg --add-architecture $arch)"
    dpkg --add-architecture "$arch"
    apt-get update -qq >/dev/null
  fi
  if [[ $arch == arm64 ]] && ! command -v aarch64-linux-gnu-gcc >/dev/null; then
    [[ $(id -u) == 0 ]] || { echo "images: apt-get install gcc-aarch64-linux-gnu" >&2; return 1; }
    echo "images: installing Debian's cross compiler (gcc-aarch64-linux-gnu)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc-aarch64-linux-gnu libc6-dev-arm64-cross >/dev/null
  fi
}

# cross_cc is the C compiler for arch's cgo.
cross_cc() { # arch
  case $1 in
    "$(dpkg --print-architecture)") echo "${CC:-gcc}" ;;
    arm64) echo aarch64-linux-gnu-gcc ;;
    amd64) echo x86_64-linux-gnu-gcc ;;
    *) echo "images: no cross compiler known for $1" >&2; return 1 ;;
  esac
}

# base_images makes (or finds cached) the two base images of arch and sets
# static_base and glibc_base to their names, and debs to apt's
# "FILE SHA256" lines of the packages in them.
base_images() { # arch
  local arch=$1 uris key tmp
  if ! uris=$(cd "$cache" && apt-get download --print-uris "libc6:$arch" ca-certificates 2>&1); then
    echo "images: apt cannot resolve libc6:$arch and ca-certificates (run apt-get update): $uris" >&2
    return 1
  fi
  debs=$(echo "$uris" | awk '{sub(/^SHA256:/, "", $4); print $2, $4}')
  key=$( { echo "$arch"; echo "$uris" | awk '{print $2, $4}'; sed -n '/^base_images()/,/^}/p' "$0"; } | sha256sum | cut -c1-16)
  static_base=localhost/gpuscale-base-static:$key
  glibc_base=localhost/gpuscale-base-glibc:$key
  base_static_tar=$cache/base-static-$key.tar
  base_glibc_tar=$cache/base-glibc-$key.tar
  if podman image exists "$static_base" && podman image exists "$glibc_base" && [[ -f $base_static_tar && -f $base_glibc_tar ]]; then
    echo "images: base images $key ($arch) cached"
    return 0
  fi
  if [[ ! -f "$cache/base-static-$key.tar" || ! -f "$cache/base-glibc-$key.tar" ]]; then
    echo "images: building base rootfs $key from Debian packages"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' RETURN
    # As root, apt warns that it downloads outside its _apt sandbox: noise.
    if ! (cd "$tmp" && apt-get download "libc6:$arch" ca-certificates >"$tmp/apt.log" 2>&1); then
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
  podman import --quiet --arch "$arch" --os linux "$base_static_tar" "$static_base" >/dev/null
  podman import --quiet --arch "$arch" --os linux "$base_glibc_tar" "$glibc_base" >/dev/null
  if [[ $arch == "$host_arch" ]]; then
    # Dockerfile's defaults, for a plain `buildah bud --target adapter .`.
    podman tag "$static_base" localhost/gpuscale-base-static:latest
    podman tag "$glibc_base" localhost/gpuscale-base-glibc:latest
  fi
  echo "images: base images $key ($arch) imported"
}

# json_str quotes a string for JSON (the values here hold no control characters).
json_str() { local s=${1//\\/\\\\}; printf '"%s"' "${s//\"/\\\"}"; }

record=()
for arch in "${archs[@]}"; do
  arch_tools "$arch"
  base_images "$arch"
  CC=$(cross_cc "$arch") hack/binaries.sh "$arch"
  sbom_dir=_output/sbom/linux_$arch
  mkdir -p "$sbom_dir"
  for name in adapter exporter inferencesim; do
    # The packages in the image's base: the static base holds
    # ca-certificates' files, the glibc base libc6's too.
    deb_args=()
    while read -r file sum; do
      [[ $name != exporter && $file == libc6_* ]] && continue
      deb_args+=(--deb "$file=$sum")
    done <<<"$debs"
    go run ./hack/sbom --binary "_output/bin/linux_$arch/$name" --name "gpuscale-$name" --version "$version" \
      --arch "$arch" --created "$created" "${deb_args[@]}" >"$sbom_dir/gpuscale-$name.spdx.json"
    base=$static_base base_tar=$base_static_tar
    [[ $name == exporter ]] && base=$glibc_base base_tar=$base_glibc_tar
    image=localhost/gpuscale-$name:$version-$arch
    buildah bud --quiet --pull=never --target "$name" --timestamp "$epoch" --platform "linux/$arch" \
      --build-arg STATIC_BASE="$static_base" --build-arg GLIBC_BASE="$glibc_base" \
      --build-arg TARGETOS=linux --build-arg TARGETARCH="$arch" \
      --build-arg VERSION="$version" --build-arg REVISION="$revision" --build-arg CREATED="$created" \
      -t "$image" -f Dockerfile . >/dev/null
    [[ $arch == "$host_arch" ]] && podman tag "$image" "localhost/gpuscale-$name:$version"
    archive=$out/gpuscale-${name}_${version}_linux_${arch}.oci.tar
    rm -f "$archive"
    podman save --quiet --format oci-archive -o "$archive" "$image"
    cp "$sbom_dir/gpuscale-$name.spdx.json" "${archive%.oci.tar}.spdx.json"
    deb_json=$(while read -r file sum; do
      [[ $name != exporter && $file == libc6_* ]] && continue
      printf '{"file": %s, "sha256": %s},' "$(json_str "$file")" "$(json_str "$sum")"
    done <<<"$debs")
    record+=("$(printf '{"name": "gpuscale-%s", "arch": %s, "image": %s, "id": %s, "archive": %s, "archiveSHA256": %s, "sbom": %s, "base": {"image": %s, "id": %s, "layer": %s, "debs": [%s]}}' \
      "$name" "$(json_str "$arch")" "$(json_str "$image")" "$(json_str "$(podman image inspect --format '{{.Id}}' "$image")")" \
      "$(json_str "$archive")" "$(json_str "$(sha256sum "$archive" | cut -d' ' -f1)")" "$(json_str "${archive%.oci.tar}.spdx.json")" \
      "$(json_str "$base")" "$(json_str "$(podman image inspect --format '{{.Id}}' "$base")")" \
      "$(json_str "sha256:$(sha256sum "$base_tar" | cut -d' ' -f1)")" "${deb_json%,}")")
    printf 'images: %-50s %s\n' "$image" "$archive"
  done
done
{
  printf '{\n  "version": %s,\n  "revision": %s,\n  "created": %s,\n  "images": [\n' "$(json_str "$version")" "$(json_str "$revision")" "$(json_str "$created")"
  for i in "${!record[@]}"; do
    sep=,; [[ $i == $((${#record[@]} - 1)) ]] && sep=
    printf '    %s%s\n' "${record[$i]}" "$sep"
  done
  printf '  ]\n}\n'
} >"$out/build-record.json"
echo "images: build record $out/build-record.json"
