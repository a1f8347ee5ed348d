# Sourced by every script that runs the go command, and read by the
# Makefile: the one build configuration that tests, vet, the binaries and
# the cached third-party builds (control plane, KEDA, helm, kwok,
# staticcheck) share, so that the Go build cache compiles each library once.
#
# The go command keys a compiled package on its files, its dependencies'
# compiled contents and its flags, not on the module that asked for it: a
# k8s.io/client-go package built here for kube-apiserver is the one the
# unit tests link, provided the versions (test/deps checks them) and these
# settings agree.
#   CGO_ENABLED=0   what the static binaries need. With cgo, net and os/user
#                   compile differently, and so does every package above
#                   them. The cgo builds (the exporter with go-nvml, and
#                   -race) set CGO_ENABLED=1 themselves; with the netgo and
#                   osusergo tags the exporter then differs from this
#                   configuration in go-nvml, runtime/cgo and its own main
#                   package only.
#   -trimpath       reproducible binaries; with it a module's packages hash
#                   by module@version, not by folder, so every checkout and
#                   tools module shares them.
#   -tags           nomsgpack drops gin's msgpack codec (6 MiB less resident
#                   memory in the exporter); netgo and osusergo are what
#                   CGO_ENABLED=0 means anyway, named so a cgo build selects
#                   the same files.
#   -gcflags=all=-dwarf=false
#                   no DWARF debug information. Every binary this project
#                   links (hack/binaries.sh, the tools, KEDA) is stripped
#                   with -s -w, so the linker threw it away; generating it
#                   cost about 5% of every compile (client-go's core/v1
#                   client and its 471 dependencies on an empty cache, two
#                   cores: 140 s of user CPU with it, 130-135 s without,
#                   2026-12-04) and a DWARF section in every test binary.
#                   Panics, pprof and runtime.Caller read the symbol and
#                   line tables, which stay. To debug a test with delve,
#                   build it outside make (GOFLAGS unset).
# A variable the caller already set wins, and sourcing it again (make reads
# it, then runs scripts that source it) changes nothing: the cached builds'
# keys hash GOFLAGS, so it must read the same however it was reached.
gpuscale_goflags="-trimpath -tags=nomsgpack,netgo,osusergo -gcflags=all=-dwarf=false"
case " ${GOFLAGS:-} " in
  *" $gpuscale_goflags "*) ;;
  *) export GOFLAGS="${GOFLAGS:+$GOFLAGS }$gpuscale_goflags" ;;
esac
unset gpuscale_goflags
export CGO_ENABLED=${CGO_ENABLED:-0}
# go-nvml's cgo bindings include NVML 13 headers whose deprecations are noise.
export CGO_CFLAGS=${CGO_CFLAGS:--Wno-deprecated-declarations}
