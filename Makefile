# gpuscale: `make demo` runs the main job, `make test` runs every test CI runs.
SHELL := /usr/bin/env bash
GO ?= go
# go-nvml's cgo bindings include NVML 13 headers whose deprecations are noise.
export CGO_CFLAGS ?= -Wno-deprecated-declarations
FUZZTIME ?= 5s

.PHONY: all build lint race unit fuzz-short fuzz e2e test demo bench bench-autoscale bench-list soak clean control-plane manifests images test-images chart-readme

all: build

# The binaries under the names the images give them (bin/gpuscale-adapter,
# bin/gpuscale-exporter, bin/gpuscale-inferencesim), with the version
# stamped as hack/binaries.sh stamps it, so --version and gpuscale_build_info
# say which build runs. nomsgpack drops gin's msgpack codec: 6 MiB less
# resident memory per exporter.
VERSION_PKG := github.com/prometheus/common/version
BUILD_LDFLAGS = -X $(VERSION_PKG).Version=$(shell hack/version.sh) \
  -X $(VERSION_PKG).Revision=$(shell git rev-parse HEAD 2>/dev/null || echo unknown) \
  -X $(VERSION_PKG).Branch=$(shell git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown) \
  -X $(VERSION_PKG).BuildDate=$(shell git log -1 --format=%cI 2>/dev/null)
BINARIES := adapter exporter inferencesim
build:
	@for b in $(BINARIES); do \
	  echo "$(GO) build -o bin/gpuscale-$$b ./cmd/$$b"; \
	  $(GO) build -tags nomsgpack -ldflags "$(BUILD_LDFLAGS)" -o bin/gpuscale-$$b ./cmd/$$b || exit 1; \
	done

# Linux-only code carries build tags, so the module vets on macOS too. CI
# vets for macOS only the packages that hold such code and the binary built
# from them: a cold macOS vet of the whole module compiles every dependency
# again (about 8 minutes on two cores, docs/architecture.md).
# `make lint DARWIN_VET_PKGS=./...` checks the whole module.
DARWIN_VET_PKGS ?= ./cmd/exporter/... ./internal/exporterapp/... ./internal/childproc/... ./pkg/gpu/...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOOS=darwin $(GO) vet $(DARWIN_VET_PKGS)
	hack/staticcheck.sh ./...

# The packages that run goroutines of their own, under the race detector.
RACE_PKGS ?= ./pkg/... ./cmd/... ./internal/childproc/
race:
	$(GO) test -race -count=1 $(RACE_PKGS)

unit:
	$(GO) test -count=1 ./...
	cd test/promqlcompat && $(GO) test -count=1 ./...
	cd test/dashboards && $(GO) test -count=1 ./...
	hack/manifests.sh --check

# Regenerates the chart README's values table from values.schema.json
# (hack/manifests.sh --check, in `make unit`, fails when it is stale).
chart-readme:
	$(GO) run ./hack/chart-readme

# Regenerates deploy/manifests from the Helm chart (helm is built once from
# its Go module by hack/helm.sh and cached in ~/.cache/gpuscale).
manifests:
	hack/manifests.sh

# Every fuzz target for a bounded time (FUZZTIME each); `make fuzz FUZZTIME=5m` goes deeper.
fuzz-short:
	@hack/fuzz.sh $(FUZZTIME)

fuzz:
	@hack/fuzz.sh $(FUZZTIME)

# The end-to-end suite on a real local control plane (built once from Go
# modules by hack/control-plane-build.sh and cached in ~/.cache/gpuscale),
# with a real KEDA for test/keda (hack/keda-build.sh, cached likewise).
e2e:
	hack/control-plane-build.sh >/dev/null
	hack/keda-build.sh >/dev/null
	@mkdir -p _output
	@GPUSCALE_E2E=1 $(GO) test -p 1 -count=1 -timeout 45m -v ./internal/localcluster/ ./test/e2e/ ./test/keda/ ./test/autoscale/ >_output/e2e.log 2>&1; rc=$$?; \
	  grep -E '^(=== RUN|\s*--- |PASS|FAIL|ok|e2e:)|FIGURE' _output/e2e.log; \
	  if [ $$rc -ne 0 ]; then echo "--- e2e failed; the last 150 lines of _output/e2e.log:"; tail -150 _output/e2e.log; fi; exit $$rc

# The adapter, exporter and inferencesim images for amd64 and arm64, built
# with buildah from Dockerfile on bases made from Debian packages (no
# registry is needed), each with an SPDX SBOM: the local podman store, OCI
# archives and the build record in _output/images; docs/images.md.
# IMAGE_ARCHS="amd64" builds one.
images:
	hack/images.sh

# Runs the images as the Helm chart renders them (test/containers): the
# exporter's probes and /metrics, the adapter serving the local control
# plane's metrics APIs through the aggregator. Needs root and podman.
test-images:
	hack/images.sh $$($(GO) env GOARCH)
	hack/control-plane-build.sh >/dev/null
	GPUSCALE_IMAGES=1 $(GO) test -count=1 -timeout 20m -v ./test/containers/

test: lint unit race fuzz-short e2e test-images

# Built, then run: Ctrl-C stops it cleanly with exit status 0 (`go run`
# would report the interrupted child as a failure).
demo:
	hack/control-plane-build.sh >/dev/null
	$(GO) build -o _output/bin/demo ./hack/demo
	_output/bin/demo

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...

# Replays the recorded hour of LLM traffic under four autoscaling policies
# (about 12 minutes at the default 6x); docs/autoscaling.md. Pass flags
# with BENCH_FLAGS, e.g. BENCH_FLAGS="--start=40m --duration=2m".
bench-autoscale:
	hack/control-plane-build.sh >/dev/null
	$(GO) run ./hack/bench-autoscale $(BENCH_FLAGS)

# Times the HPA's Pods-metric list through the kube-apiserver's aggregation
# layer at 1,000 and 10,000 scraped pods (about 5 minutes; one socket per
# pod, so an open files limit above 15,000); docs/performance.md. Flags in
# BENCH_FLAGS.
bench-list:
	hack/control-plane-build.sh >/dev/null
	$(GO) run ./hack/bench-list $(BENCH_FLAGS)

# Keeps 10,000 healthy inference pods and 100 hostile targets (bombs,
# endless bodies, cardinality, out-of-range values, duplicates, broken
# histograms, redirects, silence) scraped every 5 s for 10 minutes, and
# reports the adapter's peak RSS, scrape-cycle p99 and the healthy pods'
# worst staleness (about 20 minutes in all; not in CI); docs/performance.md.
soak:
	hack/control-plane-build.sh >/dev/null
	$(GO) run ./hack/bench-list --pods=10000 --scrape-interval=5s --soak=10m --out=_output/soak $(BENCH_FLAGS)

control-plane:
	hack/control-plane-build.sh

clean:
	rm -rf bin _output
