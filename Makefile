# gpuscale: `make demo` runs the main job, `make test` runs every test CI runs.
SHELL := /usr/bin/env bash
GO ?= go
FUZZTIME ?= 5s
MODULE := github.com/gpuscale/gpuscale

# One build configuration for tests, vet, the binaries and the cached
# third-party builds, so that each library compiles once: hack/lib/goenv.sh.
export CGO_ENABLED := $(shell . hack/lib/goenv.sh && echo "$$CGO_ENABLED")
export GOFLAGS := $(shell . hack/lib/goenv.sh && echo "$$GOFLAGS")
export CGO_CFLAGS := $(shell . hack/lib/goenv.sh && echo "$$CGO_CFLAGS")

# go test runs a subset of vet's checks on each package it tests, and works
# out their facts over every dependency again, apart from go vet's: a third
# on top of a cold compile (docs/architecture.md, "Checks"). make lint runs
# go vet ./..., every check over every package and its tests, so this
# module's tests skip it; the test modules (test/promqlcompat,
# test/dashboards), which make lint does not vet, keep it.
TESTFLAGS := -vet=off

.PHONY: all build lint race unit hostile fuzz-short fuzz e2e test demo bench bench-autoscale bench-disaggregated bench-list bench-promql bench-hpa robustness soak clean control-plane tools manifests images test-images chart-readme

all: build

# The binaries under the names the images give them (bin/gpuscale-adapter,
# bin/gpuscale-exporter, bin/gpuscale-inferencesim), with the version
# stamped as hack/binaries.sh stamps it, so --version and gpuscale_build_info
# say which build runs. The exporter links go-nvml with cgo; with the netgo
# and osusergo tags (goenv.sh) it shares every other package with the static
# binaries.
VERSION_PKG := github.com/prometheus/common/version
BUILD_LDFLAGS = -X $(VERSION_PKG).Version=$(shell hack/version.sh) \
  -X $(VERSION_PKG).Revision=$(shell git rev-parse HEAD 2>/dev/null || echo unknown) \
  -X $(VERSION_PKG).Branch=$(shell git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown) \
  -X $(VERSION_PKG).BuildDate=$(shell git log -1 --format=%cI 2>/dev/null)
build:
	$(GO) build -ldflags "$(BUILD_LDFLAGS)" -o bin/gpuscale-adapter ./cmd/adapter
	$(GO) build -ldflags "$(BUILD_LDFLAGS)" -o bin/gpuscale-inferencesim ./cmd/inferencesim
	CGO_ENABLED=1 $(GO) build -ldflags "$(BUILD_LDFLAGS)" -o bin/gpuscale-exporter ./cmd/exporter

# Which target runs a package's tests; every package runs in exactly one.
#   RACE_PKGS   packages with concurrency of their own (goroutines, servers,
#               informers, state shared between requests): once, under the
#               race detector, which needs cgo (and so also runs go-nvml's
#               cgo backend, pkg/exporter/backend/nvml).
#   E2E_PKGS    a real control plane and KEDA: make e2e.
#   IMAGE_PKGS  the images run as the chart runs them: make test-images.
#   HOSTILE_PKGS hostile fleets against the real scraper on loopback, whose
#               checks are about which targets a cycle reaches in its
#               interval: make hostile, last in make test, once the e2e
#               suite's control plane and the other phases' compiles are
#               done. Beside them a starved machine, not a hostile target,
#               can cost the healthy pods two 2 s cycles (a warm CI run of
#               5f2ac99 did, in TestHangAfterAnswer512).
#   the rest    once, in make unit.
#               internal/bench/offlinereplay (virtual time, one goroutine) and
#               internal/bench/autoscalebench (its tests cover the report and the
#               plots; its concurrent Run is test/autoscale's) run in make
#               unit: under -race their plotting and replays took 130 s.
#               cmd/adapter/app (flags, options and wiring; the goroutines it
#               starts are its packages', tested under -race there, and the
#               whole adapter's in make e2e) runs in make unit: under -race
#               it alone brought the apiserver's 289 packages to that build.
RACE_PKGS := cmd/exporter/app cmd/inferencesim \
  internal/harness/childproc internal/harness/devenv internal/harness/hostile \
  internal/harness/simworld internal/harness/testlog \
  internal/bench/robustness \
  pkg/signal/capacity pkg/adapter/certrotation pkg/exporter/processpods pkg/exporter pkg/exporter/httpapi pkg/adapter/federation pkg/adapter/gather pkg/exporter/backend/nvml pkg/exporter/backend/sim \
  pkg/inferencesim pkg/adapter/kedascaler pkg/exporter/podresources pkg/adapter/promsource pkg/adapter/promsource/promapi pkg/provider pkg/scaledown \
  pkg/adapter/scrape pkg/adapter/store pkg/adapter/storesource
# test/keda also needs KEDA's build: it runs last, so the others run while
# a cold KEDA build compiles (they mostly wait on timers).
E2E_CORE_PKGS := internal/harness/localcluster test/e2e test/autoscale
E2E_KEDA_PKGS := test/keda
E2E_PKGS := $(E2E_CORE_PKGS) $(E2E_KEDA_PKGS)
IMAGE_PKGS := test/containers
HOSTILE_PKGS := test/hostile
pkgs = $(addprefix ./,$(addsuffix /,$(1)))
UNIT_PKGS = $$($(GO) list ./... | grep -v -x -F $(foreach p,$(RACE_PKGS) $(E2E_PKGS) $(IMAGE_PKGS) $(HOSTILE_PKGS),-e $(MODULE)/$(p)))

# go vet for Linux, and with cgo for the packages that hold cgo code; for
# macOS only where a file is built for macOS and not for Linux
# (childproc's sysproc_other.go): vetting anything more compiles its
# dependencies for macOS, once more. staticcheck (hack/tools) likewise.
CGO_PKGS := ./pkg/exporter/backend/nvml/
DARWIN_VET_PKGS ?= ./internal/harness/childproc/

# Every module's go.mod and go.sum are tidy: the test modules replace the
# main module with this checkout, so a change to its requirements needs
# theirs updated too.
GO_MODULES := . test/promqlcompat test/dashboards hack/tools hack/tools/keda

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@for m in $(GO_MODULES); do (cd $$m && $(GO) mod tidy -diff) || { echo "go.mod or go.sum of $$m is not tidy: run go mod tidy there"; exit 1; }; done
	$(GO) vet ./...
	CGO_ENABLED=1 $(GO) vet $(CGO_PKGS)
	GOOS=darwin $(GO) vet $(DARWIN_VET_PKGS)
	hack/staticcheck.sh ./...
	CGO_ENABLED=1 hack/staticcheck.sh $(CGO_PKGS)
	hack/verify-generated.sh

race:
	CGO_ENABLED=1 $(GO) test $(TESTFLAGS) -race -count=1 $(call pkgs,$(RACE_PKGS))

unit:
	$(GO) test $(TESTFLAGS) -count=1 $(UNIT_PKGS)
	cd test/promqlcompat && $(GO) test -count=1 ./...
	cd test/dashboards && $(GO) test -count=1 ./...

hostile:
	$(GO) test $(TESTFLAGS) -count=1 $(call pkgs,$(HOSTILE_PKGS))

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
	@TESTFLAGS=$(TESTFLAGS) hack/fuzz.sh $(FUZZTIME)

fuzz:
	@TESTFLAGS=$(TESTFLAGS) hack/fuzz.sh $(FUZZTIME)

# The end-to-end suite on a real local control plane (built once from Go
# modules by hack/tools-build.sh and cached in ~/.cache/gpuscale), with a
# real KEDA for test/keda (hack/keda-build.sh, cached likewise).
e2e:
	hack/tools-build.sh >/dev/null
	@mkdir -p _output
	@(hack/keda-build.sh >_output/keda-build.log 2>&1; echo $$? >_output/keda-build.rc) & \
	  GPUSCALE_E2E=1 $(GO) test $(TESTFLAGS) -p 1 -count=1 -timeout 45m -v $(call pkgs,$(E2E_CORE_PKGS)) >_output/e2e.log 2>&1; rc=$$?; \
	  wait; if [ "$$(cat _output/keda-build.rc)" != 0 ]; then echo "--- KEDA's build failed:"; tail -50 _output/keda-build.log; exit 1; fi; \
	  if [ $$rc -eq 0 ]; then GPUSCALE_E2E=1 $(GO) test $(TESTFLAGS) -p 1 -count=1 -timeout 20m -v $(call pkgs,$(E2E_KEDA_PKGS)) >>_output/e2e.log 2>&1; rc=$$?; fi; \
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
# plane's metrics APIs through the aggregator. Needs root and podman. Its
# environment has a port and pod addresses of its own, so that it runs
# beside make e2e (make test does).
test-images:
	hack/images.sh $$($(GO) env GOARCH)
	hack/tools-build.sh >/dev/null
	GPUSCALE_ADAPTER_PORT=16643 GPUSCALE_POD_CIDR=127.20.0.0/16 GPUSCALE_IMAGES=1 $(GO) test $(TESTFLAGS) -count=1 -timeout 20m -v $(call pkgs,$(IMAGE_PKGS))

# Every phase, each one's wall time printed as it ends and in a table at
# the end (hack/phases.sh). The end-to-end suite, which mostly waits on the
# HPA's and the scrapes' timers, starts first, in the background (+e2e; its
# output is in _output/phase-e2e.log), beside race, lint, unit, fuzzing and
# the images, which mostly compute. On a cold machine it waits for the
# tools build that .ci/run started (hack/tools-build.sh's lock), and its
# KEDA tests for KEDA's build, while the other phases run. The hostile
# fleets run last, alone (HOSTILE_PKGS).
TEST_PHASES := +e2e race lint unit fuzz-short test-images wait hostile
test:
	@hack/phases.sh $(MAKE) $(TEST_PHASES)

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
# BENCH_FLAGS=--disaggregated replays the disaggregated workload instead (a
# prefill and a decode Deployment under static, single-pool and per-role
# HPAs, about 9 minutes) beside its offline replay (make bench-disaggregated).
bench-autoscale:
	hack/control-plane-build.sh >/dev/null
	$(GO) run ./hack/bench-autoscale $(BENCH_FLAGS)

# Every policy on the workload family and the recorded workloads in the
# offline replay's virtual time (about a minute of CPU), and the
# robustness table of docs/autoscaling.md written anew.
robustness:
	$(GO) run ./hack/offline-replay --family --update-docs=docs/autoscaling.md

# The disaggregated workload (a prefill and a decode pool) under static,
# single-pool and per-role policies in the offline replay (about 10 s of
# CPU): the table of docs/autoscaling.md, "Prefill/decode disaggregation".
bench-disaggregated:
	$(GO) run ./hack/offline-replay --disaggregated

# Times the HPA's Pods-metric list through the kube-apiserver's aggregation
# layer at 1,000 and 10,000 scraped pods (about 5 minutes; child processes
# serve the pods, 4,096 each, and the adapter keeps a socket a pod);
# docs/performance.md. Flags in BENCH_FLAGS.
bench-list:
	hack/control-plane-build.sh >/dev/null
	$(GO) run ./hack/bench-list $(BENCH_FLAGS)

# gpuscale's PromQL source (--source=prometheus, custom.metrics v1beta2) beside
# prometheus-adapter v0.12.0 (v1beta1) through one aggregator, both reading one
# Prometheus that scrapes one exposition of 10,000 pods' series every 5 s: list
# latency and CPU per list of each adapter, Prometheus and kube-apiserver,
# timed in turns (about 9 minutes; the first run builds prometheus-adapter,
# ~1,100 packages, a few minutes more); docs/performance.md. Flags in BENCH_FLAGS.
bench-promql:
	hack/control-plane-build.sh >/dev/null
	$(GO) run ./hack/bench-list --source=promql --pods=10000 --out=_output/bench-promql $(BENCH_FLAGS)

# 1,000 Deployments of one scraped pod, each with an HPA on its capacity
# (Object) and its queue depth (Pods), on the real HPA controller at a 15 s
# sync: the adapter's CPU beyond scraping, the metrics API's p99 and the
# HPA controller's queue lag (about 10 minutes); docs/performance.md. The
# controller manager's client gets 200 QPS (burst 300): at its default 20, the
# 133 metric reads a second that 1,000 HPAs of two metrics make at a 15 s sync
# cannot be made at all.
bench-hpa:
	hack/control-plane-build.sh >/dev/null
	$(GO) run ./hack/bench-list --hpas=1000 --pods=1000 --scrape-interval=15s --controller-manager-args=--kube-api-qps=200,--kube-api-burst=300 --out=_output/bench-hpa $(BENCH_FLAGS)

# Keeps 10,000 healthy inference pods scraped every 5 s for 10 minutes
# beside hostile targets: 100 of the first round's kinds (bombs, endless
# bodies, cardinality, out-of-range values, duplicates, broken histograms,
# redirects, silence), 2,000 tenant pods in each of 4 namespaces (model-name
# bombs, routers, capacity inputs at the per-scrape limits), 512 that answer
# once and then hang, and 1,024 selector floods; reports the adapter's peak
# RSS, scrape-cycle p99 and the healthy pods' worst staleness (about 20
# minutes in all; not in CI); docs/performance.md. The adapter runs in a
# memory cgroup with the chart's limit, so it needs root.
soak:
	hack/control-plane-build.sh >/dev/null
	$(GO) run ./hack/bench-list --pods=10000 --scrape-interval=5s --soak=10m --adapter-memory-limit=chart --out=_output/soak $(BENCH_FLAGS)

control-plane tools:
	hack/tools-build.sh

clean:
	rm -rf bin _output
