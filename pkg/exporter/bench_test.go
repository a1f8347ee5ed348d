package exporter_test

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscale/gpuscale/internal/harness/cpumeter"
	"github.com/gpuscale/gpuscale/pkg/exporter"
	"github.com/gpuscale/gpuscale/pkg/exporter/backend/sim"
	"github.com/gpuscale/gpuscale/pkg/exporter/httpapi"
	"github.com/gpuscale/gpuscale/pkg/gpu/dcgm"
	"github.com/gpuscale/gpuscale/pkg/metrics"
)

// podsFor holds every device of one collection by its own pod, as on a
// fully packed node.
type podsFor map[string][]metrics.PodRef

func (p podsFor) PodsByDevice() map[string][]metrics.PodRef { return p }

// benchCollector is a collector over simulated GPUs with every GPU (or MIG
// instance, when migs is set) held by a pod, and the registry the exporter
// builds around it, without the Go and process collectors.
func benchCollector(b *testing.B, gpus int, migs []string) (*exporter.Collector, *prometheus.Registry) {
	return benchCollectorSchema(b, gpus, migs, dcgm.Schema48)
}

// benchCollectorSchema is benchCollector serving schema.
func benchCollectorSchema(b *testing.B, gpus int, migs []string, schema dcgm.Schema) (*exporter.Collector, *prometheus.Registry) {
	b.Helper()
	backend, err := sim.New(sim.Options{GPUs: gpus, MIGProfiles: migs, Identity: "bench-node"})
	if err != nil {
		b.Fatal(err)
	}
	readings, err := backend.Collect(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	pods := podsFor{}
	for i, r := range readings {
		if len(migs) > 0 && r.Device.MIG == nil {
			continue
		}
		pods[r.Device.ID()] = []metrics.PodRef{{Namespace: "inference", Pod: fmt.Sprintf("vllm-%d", i), Container: "vllm"}}
	}
	reg := prometheus.NewRegistry()
	c, err := exporter.NewCollector(exporter.Config{
		Backend: backend, Pods: pods, Hostname: "bench-node", Interval: time.Second, Registerer: reg,
		Schema: schema,
	})
	if err != nil {
		b.Fatal(err)
	}
	// The exporter's /metrics serves the collector's encoded snapshot
	// after the registry's own families; the collector is not in it.
	if err := c.CollectOnce(context.Background()); err != nil {
		b.Fatal(err)
	}
	return c, reg
}

// benchScrape measures one /metrics request through the exporter's
// handler without its request limit.
func benchScrape(b *testing.B, gpus int, migs []string, acceptEncoding string) {
	c, reg := benchCollector(b, gpus, migs)
	benchHandler(b, httpapi.New(httpapi.Config{Source: c, Gatherer: reg, Hostname: "bench-node"}), acceptEncoding)
}

// benchHandler measures one GET /metrics through h.
func benchHandler(b *testing.B, h http.Handler, acceptEncoding string) {
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	var size int
	b.ReportAllocs()
	cpu := cpumeter.Start(b)
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		size = rec.Body.Len()
	}
	cpu.Report(b)
	b.ReportMetric(float64(size), "resp-B")
}

// BenchmarkScrape8GPUs is a scrape of a packed 8-GPU node. Scrapes of one
// snapshot share its render, so this is what a scrape costs once the
// snapshot is rendered (a second Prometheus, the adapter); the first
// scrape of each snapshot is BenchmarkRender8GPUs.
func BenchmarkScrape8GPUs(b *testing.B) { benchScrape(b, 8, nil, "") }

// BenchmarkRender8GPUs is the first scrape of each snapshot, rendering it:
// each iteration publishes a new snapshot (the collection is outside the
// timed CPU) and scrapes it, in both schemas and formats.
func BenchmarkRender8GPUs(b *testing.B) {
	for _, schema := range dcgm.Schemas {
		for _, enc := range []string{"", "gzip"} {
			b.Run(fmt.Sprintf("schema=%s/encoding=%s", schema, cmp.Or(enc, "identity")), func(b *testing.B) {
				c, reg := benchCollectorSchema(b, 8, nil, schema)
				h := httpapi.New(httpapi.Config{Source: c, Gatherer: reg, Hostname: "bench-node"})
				req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
				if enc != "" {
					req.Header.Set("Accept-Encoding", enc)
				}
				ctx := context.Background()
				var size int
				b.ReportAllocs()
				cpu := cpumeter.Start(b)
				for b.Loop() {
					cpu.Pause(b)
					if err := c.CollectOnce(ctx); err != nil {
						b.Fatal(err)
					}
					runtime.GC() // the collection's garbage is the collection's cost
					cpu.Resume(b)
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						b.Fatalf("status %d: %s", rec.Code, rec.Body)
					}
					size = rec.Body.Len()
				}
				cpu.Report(b)
				b.ReportMetric(float64(size), "resp-B")
			})
		}
	}
}

// BenchmarkScrape8GPUsGzip is the same scrape as Prometheus asks for it.
func BenchmarkScrape8GPUsGzip(b *testing.B) { benchScrape(b, 8, nil, "gzip") }

// BenchmarkScrape8GPUsx7MIG is a scrape of 8 GPUs split into seven 1g.10gb
// instances each, every instance held by a pod.
func BenchmarkScrape8GPUsx7MIG(b *testing.B) {
	benchScrape(b, 8, slices.Repeat([]string{"1g.10gb"}, 7), "")
}

// BenchmarkScrapeHandler8GPUsGzip is BenchmarkScrape8GPUsGzip through the
// exporter's whole handler (gin, the in-flight limit, promhttp) with the
// exporter's default limit, as a Prometheus scrape reaches it.
func BenchmarkScrapeHandler8GPUsGzip(b *testing.B) {
	c, reg := benchCollector(b, 8, nil)
	h := httpapi.New(httpapi.Config{Source: c, Gatherer: reg, Hostname: "bench-node",
		MaxRequests: 256, MaxRequestsWait: time.Second})
	benchHandler(b, h, "gzip")
}

// BenchmarkCollectOnce8GPUs is the background collection: read the sim
// backend, attribute pods, build the metrics.
func BenchmarkCollectOnce8GPUs(b *testing.B) {
	for _, schema := range dcgm.Schemas {
		b.Run("schema="+schema.String(), func(b *testing.B) {
			c, _ := benchCollectorSchema(b, 8, nil, schema)
			ctx := context.Background()
			b.ReportAllocs()
			cpu := cpumeter.Start(b)
			for b.Loop() {
				if err := c.CollectOnce(ctx); err != nil {
					b.Fatal(err)
				}
			}
			cpu.Report(b)
		})
	}
}
