package httpapi_test

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscale/gpuscale/pkg/exporter"
	"github.com/gpuscale/gpuscale/pkg/exporter/backend/sim"
	"github.com/gpuscale/gpuscale/pkg/exporter/httpapi"
)

func TestMetricsGzip(t *testing.T) {
	n := newSimNode(t, sim.Options{GPUs: 2})
	n.collect(t)
	tests := []struct {
		accept   string
		wantGzip bool
	}{
		{"gzip", true},
		{"br, gzip;q=0.5", true},
		{"gzip;q=0", false},
		{"", false},
	}
	for _, tt := range tests {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Accept-Encoding", tt.accept)
		rec := httptest.NewRecorder()
		n.h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("%q: status %d", tt.accept, rec.Code)
		}
		gzipped := rec.Header().Get("Content-Encoding") == "gzip"
		if gzipped != tt.wantGzip {
			t.Fatalf("Accept-Encoding %q: gzipped %v, want %v", tt.accept, gzipped, tt.wantGzip)
		}
		var body io.Reader = rec.Body
		if gzipped {
			zr, err := gzip.NewReader(rec.Body)
			if err != nil {
				t.Fatal(err)
			}
			body = zr
		}
		raw, err := io.ReadAll(body)
		if err != nil {
			t.Fatalf("%q: %v", tt.accept, err)
		}
		// Both the registry's families and the snapshot's, each once (the
		// parser refuses a family that comes twice).
		mfs := parseText(t, string(raw))
		if mfs["DCGM_FI_DEV_GPU_UTIL"] == nil || mfs["gpuscale_exporter_info"] == nil || mfs["DCGM_FI_PROF_SM_ACTIVE"] == nil {
			t.Errorf("%q: families %d, missing GPU or own series", tt.accept, len(mfs))
		}
	}
}

func TestMetricsBeforeFirstCollection(t *testing.T) {
	n := newSimNode(t, sim.Options{GPUs: 1})
	resp := do(t, n.h, http.MethodGet, "/metrics", "")
	mfs := parseText(t, readBody(t, resp))
	if resp.StatusCode != http.StatusOK || mfs["gpuscale_exporter_info"] == nil || mfs["DCGM_FI_DEV_GPU_UTIL"] != nil {
		t.Errorf("before a collection: status %d, families %v; want the exporter's own and no GPU series", resp.StatusCode, len(mfs))
	}
}

// TestMetricsWithCollectorInRegistry wires the collector into the
// gatherer too, as callers of the collector as a prometheus.Gatherer do:
// its families are still served once.
func TestMetricsWithCollectorInRegistry(t *testing.T) {
	b, err := sim.New(sim.Options{GPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	col, err := exporter.NewCollector(exporter.Config{Backend: b, Hostname: "node-a", Interval: time.Second, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := col.CollectOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := httpapi.New(httpapi.Config{Source: col, Gatherer: prometheus.Gatherers{reg, col}})
	mfs := parseText(t, readBody(t, do(t, h, http.MethodGet, "/metrics", "")))
	if len(mfs["DCGM_FI_DEV_GPU_UTIL"].GetMetric()) != 1 || mfs["gpuscale_exporter_info"] == nil {
		t.Errorf("families: GPU_UTIL %v, info %v", mfs["DCGM_FI_DEV_GPU_UTIL"], mfs["gpuscale_exporter_info"])
	}
}
