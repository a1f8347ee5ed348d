package scrape

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// benchFormats are the responses a vLLM server gives: text (what the
// Scraper asks for), the same gzip-compressed (prometheus_client compresses
// when asked), and OpenMetrics (what it sends when OpenMetrics is in Accept).
// The simulated ones are a loaded simulated vLLM's whole exposition, parsed
// whole and as the adapter parses it, selecting what it reads.
var benchFormats = []struct {
	name, file, contentType string
	gzip                    bool
	sel                     *Families
}{
	{"text", "vllm.prom", ctText, false, nil},
	{"text-gzip", "vllm.prom", ctText, true, nil},
	{"openmetrics", "vllm.om", ctOM, false, nil},
	{"simulated-vllm", "", ctText, false, nil},
	{"simulated-vllm-selected", "", ctText, false, testFamilies},
}

// benchServer serves body at every path, the simulated vLLM's when file
// is empty. B/op and allocs/op include the server's side, which runs in
// the same process.
func benchServer(b *testing.B, file, contentType string, gz bool) *httptest.Server {
	b.Helper()
	var body []byte
	if file == "" {
		body = simulatedVLLM(b)
	} else {
		body = readTestdata(b, file)
	}
	return serveBody(b, body, contentType, gz)
}

// serveBody serves body (gzip-compressed when gz) at every path.
func serveBody(b *testing.B, body []byte, contentType string, gz bool) *httptest.Server {
	b.Helper()
	h := http.Header{"Content-Type": {contentType}}
	if gz {
		body = gzipBytes(b, body)
		h.Set("Content-Encoding", "gzip")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range h {
			w.Header()[k] = v
		}
		_, _ = w.Write(body)
	}))
	b.Cleanup(srv.Close)
	return srv
}

func BenchmarkScrapeOne(b *testing.B) {
	for _, f := range benchFormats {
		b.Run(f.name, func(b *testing.B) {
			srv := benchServer(b, f.file, f.contentType, f.gzip)
			s := New(Config{})
			b.ReportAllocs()
			for b.Loop() {
				fams, err := s.ScrapeFamilies(b.Context(), srv.URL+"/metrics", f.sel)
				if err != nil || len(fams) == 0 {
					b.Fatalf("scrape: %d families, %v", len(fams), err)
				}
			}
		})
	}
}

// BenchmarkCycle1000 measures one cycle over 1,000 targets (distinct paths
// of one server) with the default 64 workers. One server stands in for
// 1,000 pods, so the idle pool per host is raised to the worker count: with
// the default of 1, connections to this one "host" would churn and exhaust
// ephemeral ports, which real targets, each its own host, never do.
func BenchmarkCycle1000(b *testing.B) {
	for _, f := range benchFormats {
		b.Run(f.name, func(b *testing.B) {
			srv := benchServer(b, f.file, f.contentType, f.gzip)
			ts := make([]Target, 1000)
			for i := range ts {
				key := fmt.Sprintf("ns/vllm-%d", i)
				ts[i] = Target{Key: key, URL: fmt.Sprintf("%s/pods/%d/metrics", srv.URL, i), Families: f.sel}
			}
			tr := newTransport(nil, DefaultMaxIdleConns)
			tr.MaxIdleConnsPerHost = DefaultWorkers
			s := New(Config{Client: &http.Client{Transport: tr}})
			var failed atomic.Int64
			sink := func(r Result) {
				if r.Err != nil || len(r.Families) == 0 {
					failed.Add(1)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				s.Cycle(b.Context(), ts, sink)
			}
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d scrapes failed", n)
			}
		})
	}
}
