package httpapi_test

import (
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpuscale/gpuscale/pkg/exporter"
	"github.com/gpuscale/gpuscale/pkg/exporter/httpapi"
)

// blockingGatherer holds every scrape until release is closed, so that a
// test controls how many are in flight.
type blockingGatherer struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

// releaseAll lets every scrape through; defer it after the server's Close
// so that a failing test does not leave Close waiting on held scrapes.
func (g *blockingGatherer) releaseAll() { g.once.Do(func() { close(g.release) }) }

func newBlockingGatherer() *blockingGatherer {
	return &blockingGatherer{entered: make(chan struct{}, 1000), release: make(chan struct{})}
}

func (g *blockingGatherer) Gather() ([]*dto.MetricFamily, error) {
	g.entered <- struct{}{}
	<-g.release
	return nil, nil
}

// awaitEntered waits until n scrapes are inside the gatherer at once.
func (g *blockingGatherer) awaitEntered(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for i := range n {
		select {
		case <-g.entered:
		case <-timeout:
			t.Fatalf("only %d of %d scrapes reached the gatherer at once", i, n)
		}
	}
}

// client gives up on a request the exporter holds too long, so that a
// limit that does not work fails the test instead of hanging it.
var client = &http.Client{Timeout: 5 * time.Second}

// scrapeAll sends n GET /metrics at once and returns their statuses.
func scrapeAll(t *testing.T, url string, n int) <-chan int {
	t.Helper()
	codes := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := client.Get(url + "/metrics")
			if err != nil {
				t.Error(err)
				codes <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	go func() { wg.Wait(); close(codes) }()
	return codes
}

// defaultMaxRequests is the exporter's --web.max-requests default. The
// realistic worst burst: a Prometheus HA pair and three adapter replicas
// each scrape one at a time, doubled while a rolling update overlaps old
// and new adapter pods, plus a second Prometheus pair and a few people with
// curl: about 12. A burst of twice the limit must still be served, the
// second half after a brief wait.
const defaultMaxRequests = 16

func TestConcurrentScrapesServed(t *testing.T) {
	g := newBlockingGatherer()
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Source: &fakeSource{}, Gatherer: g,
		MaxRequests: defaultMaxRequests, MaxRequestsWait: 10 * time.Second}))
	defer srv.Close()
	defer g.releaseAll()
	codes := scrapeAll(t, srv.URL, 2*defaultMaxRequests)
	// All of the limit in flight at once, none refused meanwhile.
	g.awaitEntered(t, defaultMaxRequests)
	g.releaseAll()
	n := 0
	for code := range codes {
		n++
		if code != http.StatusOK {
			t.Errorf("scrape %d: status %d, want 200", n, code)
		}
	}
}

func TestRequestsBeyondLimitRefused(t *testing.T) {
	tests := []struct {
		name string
		wait time.Duration
	}{
		{"refused at once", 0},
		{"refused after waiting", 50 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newBlockingGatherer()
			reg := prometheus.NewRegistry()
			src := &fakeSource{snap: &exporter.Snapshot{Time: time.Now()}, healthy: true}
			srv := httptest.NewServer(httpapi.New(httpapi.Config{Source: src, Gatherer: g,
				MaxRequests: 2, MaxRequestsWait: tc.wait, Registerer: reg}))
			defer srv.Close()
			defer g.releaseAll()
			held := scrapeAll(t, srv.URL, 2)
			g.awaitEntered(t, 2)

			resp, err := client.Get(srv.URL + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body := readBody(t, resp)
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
				!strings.Contains(body, "too many requests in flight (limit 2)") {
				t.Errorf("third scrape: %d, Retry-After %q, %q; want 503 naming the limit", resp.StatusCode, resp.Header.Get("Retry-After"), body)
			}
			// Probes are not counted: a saturated exporter is not dead.
			// Nor are API requests, which have slots of their own.
			if code := get(t, srv.URL+"/healthz"); code != http.StatusOK {
				t.Errorf("/healthz while saturated: %d, want 200", code)
			}
			if code := get(t, srv.URL+"/api/v1/gpus"); code != http.StatusOK {
				t.Errorf("/api/v1/gpus while scrapes saturate: %d, want 200", code)
			}
			g.releaseAll()
			for code := range held {
				if code != http.StatusOK {
					t.Errorf("held scrape: status %d", code)
				}
			}
			if code := get(t, srv.URL+"/metrics"); code != http.StatusOK {
				t.Errorf("scrape after the others finished: %d, want 200", code)
			}
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			refused := map[string]float64{}
			for _, mf := range mfs {
				if mf.GetName() == "gpuscale_exporter_http_requests_refused_total" {
					for _, m := range mf.GetMetric() {
						refused[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
					}
				}
			}
			if want := map[string]float64{"metrics": 1, "api": 0}; !maps.Equal(refused, want) {
				t.Errorf("gpuscale_exporter_http_requests_refused_total by handler = %v, want %v", refused, want)
			}
		})
	}
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
