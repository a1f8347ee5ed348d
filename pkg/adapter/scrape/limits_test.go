package scrape

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingTransport counts the response body bytes the Scraper reads.
type countingTransport struct {
	base http.RoundTripper
	read atomic.Int64
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(req)
	if err == nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.read}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

func countingScraper(cfg Config) (*Scraper, *countingTransport) {
	ct := &countingTransport{base: newTransport(nil, DefaultMaxIdleConns)}
	cfg.Client = &http.Client{Transport: ct}
	return New(cfg), ct
}

// TestScrapeHugeBody serves an endless stream; the Scraper must stop at the
// cap, having read no more than MaxBytes+1 bytes, and the server must see
// the connection go away.
func TestScrapeHugeBody(t *testing.T) {
	const maxBytes = 1 << 20
	var line = []byte("huge_metric{instance=\"a-rather-long-label-value\"} 1\n")
	chunk := bytes.Repeat(line, 64<<10/len(line))
	var served atomic.Int64
	stopped := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctText)
		for {
			n, err := w.Write(chunk)
			served.Add(int64(n))
			if err != nil {
				stopped <- err
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	// Limits that do not trip first, so that the cap is what stops it.
	s, ct := countingScraper(Config{MaxBytes: maxBytes, Timeout: time.Minute, Limits: Limits{MaxSeries: 1 << 30}, MaxInflightBytes: 1 << 40})
	_, err := s.Scrape(t.Context(), srv.URL)
	if !errors.Is(err, ErrTooLarge) || Reason(err) != ReasonTooLarge {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	if got := ct.read.Load(); got > maxBytes+1 {
		t.Errorf("read %d body bytes, cap is %d", got, maxBytes)
	}
	waitErr(t, stopped)
	if got := served.Load(); got > 20<<20 {
		t.Errorf("server wrote %d bytes before the client went away", got)
	}
}

func waitErr(t *testing.T, ch <-chan error) {
	t.Helper()
	done := make(chan struct{})
	go func() { <-ch; close(done) }()
	waitDone(t, done, "the server noticing the client left")
}

// TestScrapeGzipBomb serves 64 MiB that gzip to 64 KiB: the cap applies to
// the decompressed stream, and reading stops long before the compressed end.
func TestScrapeGzipBomb(t *testing.T) {
	// Comment lines are cheap to parse and cost nothing kept, so only the
	// cap stops them.
	member := gzipBytes(t, bytes.Repeat([]byte("#\n"), 1<<19))
	bomb := bytes.Repeat(member, 64) // concatenated gzip members are one stream
	srv, _ := serve(t, 200, http.Header{"Content-Type": {ctText}, "Content-Encoding": {"gzip"}}, bomb)
	s, ct := countingScraper(Config{MaxBytes: 1 << 20, Timeout: time.Minute})
	_, err := s.Scrape(t.Context(), srv.URL)
	if Reason(err) != ReasonTooLarge {
		t.Fatalf("err = %v, want too_large", err)
	}
	if got := ct.read.Load(); got >= int64(len(bomb))/2 {
		t.Errorf("read %d of %d compressed bytes; decompression should stop at the cap", got, len(bomb))
	}
}

func TestScrapeCapBoundary(t *testing.T) {
	body := readTestdata(t, "vllm.prom")
	gz := gzipBytes(t, body)
	n := int64(len(body))
	tests := []struct {
		name     string
		encoding string
		body     []byte
		maxBytes int64
		want     string
	}{
		{"exactly at cap", "", body, n, ""},
		{"one byte over", "", body, n - 1, ReasonTooLarge},
		{"gzip exactly at cap", "gzip", gz, n, ""},
		{"gzip one byte over", "gzip", gz, n - 1, ReasonTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, _ := serve(t, 200, http.Header{"Content-Type": {ctText}, "Content-Encoding": {tt.encoding}}, tt.body)
			_, err := New(Config{MaxBytes: tt.maxBytes}).Scrape(t.Context(), srv.URL)
			if got := Reason(err); got != tt.want {
				t.Errorf("reason %q, want %q (err: %v)", got, tt.want, err)
			}
		})
	}
}

// TestScrapeReusesConnections checks that bodies are consumed or drained so
// that repeated scrapes of one target share a connection, errors included.
func TestScrapeReusesConnections(t *testing.T) {
	tests := []struct {
		name   string
		status int
		ct     string
		body   string
	}{
		{"ok", 200, ctText, "up 1\n"},
		{"http error", 503, "text/plain", "overloaded, try later\n"},
		{"parse error", 200, ctText, "up one\n" + strings.Repeat("x", 1000)},
		{"openmetrics trailer", 200, ctOM, "up 1\n# EOF\ntrailing junk\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var conns atomic.Int64
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.ct)
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			t.Cleanup(srv.Close)
			s := New(Config{})
			for range 5 {
				_, _ = s.Scrape(t.Context(), srv.URL)
			}
			if got := conns.Load(); got != 1 {
				t.Errorf("5 scrapes used %d connections", got)
			}
		})
	}
}

// TestCycleBoundsIdleConnections checks that the connections kept open
// between cycles never exceed MaxIdleConns, however many targets there are,
// and that all are reused when the targets fit.
func TestCycleBoundsIdleConnections(t *testing.T) {
	const targets = 6
	tests := []struct {
		name     string
		maxIdle  int
		wantOpen int // connections open after each cycle
		wantNew  int // connections made over three cycles
	}{
		{"targets fit", targets, targets, targets},
		{"more targets than the bound", 2, 2, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opened, open atomic.Int64
			var ts []Target
			for i := range targets {
				srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", ctText)
					_, _ = w.Write([]byte("up 1\n"))
				}))
				srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
					switch st {
					case http.StateNew:
						opened.Add(1)
						open.Add(1)
					case http.StateClosed, http.StateHijacked:
						open.Add(-1)
					}
				}
				srv.Start()
				t.Cleanup(srv.Close)
				ts = append(ts, Target{Key: strconv.Itoa(i), URL: srv.URL})
			}
			s := New(Config{MaxIdleConns: tt.maxIdle, Workers: 2})
			for range 3 {
				s.Cycle(t.Context(), ts, func(r Result) {
					if r.Err != nil {
						t.Errorf("%s: %v", r.Target.Key, r.Err)
					}
				})
				// Closes reach the servers asynchronously.
				deadline := time.Now().Add(5 * time.Second)
				for open.Load() > int64(tt.wantOpen) && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				if got := open.Load(); got != int64(tt.wantOpen) {
					t.Fatalf("%d connections open after a cycle, want %d", got, tt.wantOpen)
				}
			}
			if tt.wantNew >= 0 && opened.Load() != int64(tt.wantNew) {
				t.Errorf("three cycles opened %d connections, want %d", opened.Load(), tt.wantNew)
			}
		})
	}
}
