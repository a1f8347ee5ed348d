package exporter_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscale/gpuscale/internal/cpumeter"
	"github.com/gpuscale/gpuscale/pkg/exporter"
	"github.com/gpuscale/gpuscale/pkg/exporter/httpapi"
	"github.com/gpuscale/gpuscale/pkg/gpu/sim"
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

// cpuMeter reports the process CPU time (user + system, GC included) per
// operation. On a shared machine wall time per op inflates with other
// load; CPU time is what a scrape costs the node.
// BenchmarkScrape8GPUs is a scrape of a packed 8-GPU node.
func BenchmarkScrape8GPUs(b *testing.B) { benchScrape(b, 8, nil, "") }

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
		MaxRequests: 16, MaxRequestsWait: time.Second})
	benchHandler(b, h, "gzip")
}

// BenchmarkCollectOnce8GPUs is the background collection: read the sim
// backend, attribute pods, build the metrics.
func BenchmarkCollectOnce8GPUs(b *testing.B) {
	c, _ := benchCollector(b, 8, nil)
	ctx := context.Background()
	b.ReportAllocs()
	cpu := cpumeter.Start(b)
	for b.Loop() {
		if err := c.CollectOnce(ctx); err != nil {
			b.Fatal(err)
		}
	}
	cpu.Report(b)
}
