# gpuscale: `make demo` runs the main job, `make test` runs every test CI runs.
SHELL := /usr/bin/env bash
GO ?= go
# go-nvml's cgo bindings include NVML 13 headers whose deprecations are noise.
export CGO_CFLAGS ?= -Wno-deprecated-declarations
FUZZTIME ?= 5s

.PHONY: all build lint unit fuzz-short fuzz test demo bench clean control-plane

all: build

# nomsgpack drops gin's msgpack codec: 6 MiB less resident memory per exporter.
build:
	$(GO) build -tags nomsgpack -o bin/ ./cmd/...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

unit:
	$(GO) test -count=1 ./...
	cd test/promqlcompat && $(GO) test -count=1 ./...

# Every fuzz target for a bounded time (FUZZTIME each); `make fuzz FUZZTIME=5m` goes deeper.
fuzz-short:
	@hack/fuzz.sh $(FUZZTIME)

fuzz:
	@hack/fuzz.sh $(FUZZTIME)

test: lint unit fuzz-short

demo: build
	hack/demo.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...

control-plane:
	hack/control-plane-build.sh

clean:
	rm -rf bin _output
