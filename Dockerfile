# The gpuscale images: one stage per binary (buildah bud / docker build
# --target adapter|exporter|inferencesim). The binaries are built outside
# (hack/binaries.sh: -trimpath, the version stamped in with -ldflags) into
# _output/bin/<os>_<arch>/, so this file needs no Go image and builds the
# same on a machine with no registry and in the release workflow; each
# image's SPDX SBOM (hack/sbom, from the binary's module graph) is copied
# from _output/sbom/<os>_<arch>/ to /usr/share/doc/gpuscale/sbom.spdx.json.
#
# The bases are build arguments:
#   - `make images` builds them from Debian packages (hack/images.sh):
#     localhost/gpuscale-base-static holds CA certificates and /etc/passwd;
#     localhost/gpuscale-base-glibc adds Debian's libc6.
#   - the release workflow passes gcr.io/distroless/static-debian12 and
#     gcr.io/distroless/base-nossl-debian12, which hold the same.
ARG STATIC_BASE=localhost/gpuscale-base-static:latest
ARG GLIBC_BASE=localhost/gpuscale-base-glibc:latest

FROM ${STATIC_BASE} AS adapter
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=unknown
ARG REVISION=unknown
ARG CREATED
LABEL org.opencontainers.image.title="gpuscale-adapter" \
      org.opencontainers.image.description="gpuscale's custom and external metrics API server for HPAs" \
      org.opencontainers.image.source="https://github.com/gpuscale/gpuscale" \
      org.opencontainers.image.url="https://github.com/gpuscale/gpuscale" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
COPY --chmod=0555 _output/bin/${TARGETOS}_${TARGETARCH}/adapter /usr/local/bin/gpuscale-adapter
COPY --chmod=0444 _output/sbom/${TARGETOS}_${TARGETARCH}/gpuscale-adapter.spdx.json /usr/share/doc/gpuscale/sbom.spdx.json
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpuscale-adapter"]

# The exporter links glibc: go-nvml loads libnvidia-ml.so (which the NVIDIA
# container runtime mounts in) with dlopen.
FROM ${GLIBC_BASE} AS exporter
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=unknown
ARG REVISION=unknown
ARG CREATED
LABEL org.opencontainers.image.title="gpuscale-exporter" \
      org.opencontainers.image.description="gpuscale's DCGM-compatible GPU exporter with pod attribution" \
      org.opencontainers.image.source="https://github.com/gpuscale/gpuscale" \
      org.opencontainers.image.url="https://github.com/gpuscale/gpuscale" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
COPY --chmod=0555 _output/bin/${TARGETOS}_${TARGETARCH}/exporter /usr/local/bin/gpuscale-exporter
COPY --chmod=0444 _output/sbom/${TARGETOS}_${TARGETARCH}/gpuscale-exporter.spdx.json /usr/share/doc/gpuscale/sbom.spdx.json
# Root, as the chart runs it: the kubelet's pod-resources socket
# (/var/lib/kubelet/pod-resources/kubelet.sock) is owned by root with mode
# 0755 on most distributions, and connecting to a socket needs write
# permission on it. The chart drops every capability, forbids privilege
# escalation and mounts the root filesystem read-only; without pod
# attribution run it as 65532 (docs/images.md).
USER 0:0
ENTRYPOINT ["/usr/local/bin/gpuscale-exporter"]

FROM ${STATIC_BASE} AS inferencesim
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=unknown
ARG REVISION=unknown
ARG CREATED
LABEL org.opencontainers.image.title="gpuscale-inferencesim" \
      org.opencontainers.image.description="Simulated vLLM, SGLang, TGI and Triton servers for testing gpuscale" \
      org.opencontainers.image.source="https://github.com/gpuscale/gpuscale" \
      org.opencontainers.image.url="https://github.com/gpuscale/gpuscale" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
COPY --chmod=0555 _output/bin/${TARGETOS}_${TARGETARCH}/inferencesim /usr/local/bin/gpuscale-inferencesim
COPY --chmod=0444 _output/sbom/${TARGETOS}_${TARGETARCH}/gpuscale-inferencesim.spdx.json /usr/share/doc/gpuscale/sbom.spdx.json
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpuscale-inferencesim"]
