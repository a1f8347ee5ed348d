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

// defaultMaxRequests is the exporter's --web.max-requests default: the
// scrapes served at once, all from one render per collection.
const defaultMaxRequests = 256

// gauge reads one series of a gauge or counter family from reg.
func metricValue(t *testing.T, reg prometheus.Gatherer, name, handler string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if handler == "" || (len(m.GetLabel()) > 0 && m.GetLabel()[0].GetValue() == handler) {
				return m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s{handler=%q}", name, handler)
	return 0
}

// awaitInFlight waits until n requests of a kind hold slots.
func awaitInFlight(t *testing.T, reg prometheus.Gatherer, handler string, n float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for metricValue(t, reg, "gpuscale_exporter_http_requests_in_flight", handler) < n {
		if time.Now().After(deadline) {
			t.Fatalf("never %v %s requests in flight", n, handler)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestConcurrentScrapesCoalesced: 200 scrapers at once, below the limit,
// are all served, from one render of the collection: the gatherer of the
// exporter's own families is called once, and every answer is the same.
func TestConcurrentScrapesCoalesced(t *testing.T) {
	g := newBlockingGatherer()
	reg := prometheus.NewRegistry()
	src := &fakeSource{snap: &exporter.Snapshot{Time: time.Now()}, healthy: true}
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Source: src, Gatherer: g, Registerer: reg,
		MaxRequests: defaultMaxRequests, MaxRequestsWait: time.Second}))
	defer srv.Close()
	defer g.releaseAll()
	const scrapers = 200
	codes := scrapeAll(t, srv.URL, scrapers)
	g.awaitEntered(t, 1)
	// Every scraper in flight at once, waiting for the one render.
	awaitInFlight(t, reg, "metrics", scrapers)
	g.releaseAll()
	n := 0
	for code := range codes {
		n++
		if code != http.StatusOK {
			t.Errorf("scrape %d: status %d, want 200", n, code)
		}
	}
	if len(g.entered) != 0 {
		t.Errorf("%d more renders of the same collection", len(g.entered))
	}
	if got := metricValue(t, reg, "gpuscale_exporter_scrape_renders_total", ""); got != 1 {
		t.Errorf("%v renders for %d scrapes of one collection, want 1", got, scrapers)
	}
	if got := metricValue(t, reg, "gpuscale_exporter_http_requests_refused_total", "metrics"); got != 0 {
		t.Errorf("%v scrapes refused below the limit", got)
	}
	// A new collection is rendered again, once.
	src.snap = &exporter.Snapshot{Time: time.Now()}
	for range 3 {
		if code := get(t, srv.URL+"/metrics"); code != http.StatusOK {
			t.Fatalf("scrape of the next collection: %d", code)
		}
	}
	if got := metricValue(t, reg, "gpuscale_exporter_scrape_renders_total", ""); got != 2 {
		t.Errorf("%v renders after a second collection scraped three times, want 2", got)
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
			g.awaitEntered(t, 1)
			awaitInFlight(t, reg, "metrics", 2)

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
			refused := map[string]float64{}
			for _, h := range []string{"metrics", "api", "reserved"} {
				refused[h] = metricValue(t, reg, "gpuscale_exporter_http_requests_refused_total", h)
			}
			if want := map[string]float64{"metrics": 1, "api": 0, "reserved": 0}; !maps.Equal(refused, want) {
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
