#!/usr/bin/env bash
# Prints the version stamped into binaries and images: $VERSION when set
# (the release workflow sets it from the tag), else `git describe` of the
# checkout. A leading "v" is dropped, so the tag v0.2.0 gives 0.2.0, the
# chart's appVersion and the images' tag.
set -euo pipefail
v=${VERSION:-$(git -C "$(dirname "$0")/.." describe --tags --always --dirty 2>/dev/null || echo unknown)}
echo "${v#v}"
