package scrape

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

const (
	ctText = "text/plain; version=0.0.4; charset=utf-8"
	ctOM   = "application/openmetrics-text; version=1.0.0; charset=utf-8"
)

func readTestdata(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func gzipBytes(tb testing.TB, b []byte) []byte {
	tb.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		tb.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// serve starts a test server whose handler writes body with the given
// headers, and records the last request's headers.
func serve(t *testing.T, status int, header http.Header, body []byte) (*httptest.Server, *atomic.Pointer[http.Header]) {
	t.Helper()
	var seen atomic.Pointer[http.Header]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		seen.Store(&h)
		for k, v := range header {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv, &seen
}

func TestScrapeFormats(t *testing.T) {
	text := readTestdata(t, "vllm.prom")
	om := readTestdata(t, "vllm.om")
	utf8Text := []byte("# TYPE \"gpu.util\" gauge\n{\"gpu.util\",\"gpu.id\"=\"0\"} 97\n")
	tests := []struct {
		name        string
		contentType string
		encoding    string
		body        []byte
		wantFams    int
	}{
		{"text", ctText, "", text, 11},
		{"text without content type", "", "", text, 11},
		{"openmetrics", ctOM, "", om, 11},
		{"text gzip", ctText, "gzip", gzipBytes(t, text), 11},
		{"openmetrics gzip", ctOM, "gzip", gzipBytes(t, om), 11},
		{"utf8 names", ctText, "", utf8Text, 1},
		{"empty", ctText, "", nil, 0},
		{"empty openmetrics", ctOM, "", nil, 0},
		{"empty gzip", ctText, "gzip", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.contentType != "" {
				h.Set("Content-Type", tt.contentType)
			}
			if tt.encoding != "" {
				h.Set("Content-Encoding", tt.encoding)
			}
			srv, seen := serve(t, http.StatusOK, h, tt.body)
			fams, err := New(Config{}).Scrape(t.Context(), srv.URL+"/metrics")
			if err != nil {
				t.Fatalf("Scrape: %v", err)
			}
			if len(fams) != tt.wantFams {
				t.Errorf("got %d families, want %d: %v", len(fams), tt.wantFams, familyNames(fams))
			}
			req := *seen.Load()
			if got := req.Get("Accept"); got != acceptHeader {
				t.Errorf("Accept = %q", got)
			}
			if got := req.Get("Accept-Encoding"); got != "gzip" {
				t.Errorf("Accept-Encoding = %q", got)
			}
			if got := req.Get("User-Agent"); got != DefaultUserAgent {
				t.Errorf("User-Agent = %q", got)
			}
		})
	}
}

func familyNames(fams map[string]*dto.MetricFamily) []string {
	var names []string
	for n := range fams {
		names = append(names, n)
	}
	return names
}

// TestScrapeVLLMValues checks that both wire formats of the same vLLM
// exposition decode to the same values under the same family names.
func TestScrapeVLLMValues(t *testing.T) {
	for _, tc := range []struct{ file, ct string }{{"vllm.prom", ctText}, {"vllm.om", ctOM}} {
		t.Run(tc.file, func(t *testing.T) {
			srv, _ := serve(t, http.StatusOK, http.Header{"Content-Type": {tc.ct}}, readTestdata(t, tc.file))
			fams, err := New(Config{}).Scrape(t.Context(), srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			waiting := fams["vllm:num_requests_waiting"]
			if got := waiting.GetMetric()[0].GetGauge().GetValue(); got != 7 {
				t.Errorf("vllm:num_requests_waiting = %v, want 7", got)
			}
			success := fams["vllm:request_success_total"]
			if got := len(success.GetMetric()); got != 3 || success.GetType() != dto.MetricType_COUNTER {
				t.Errorf("vllm:request_success_total: %d series of type %v, want 3 counters", got, success.GetType())
			}
			ttft := fams["vllm:time_to_first_token_seconds"].GetMetric()[0].GetHistogram()
			if n := len(ttft.GetBucket()); n < 22 {
				t.Errorf("TTFT histogram has %d buckets, want at least 22", n)
			}
			if ttft.GetSampleSum() != 321.54 || ttft.GetSampleCount()+uint64(ttft.GetSampleCountFloat()) != 1232 {
				t.Errorf("TTFT sum/count = %v/%v,%v", ttft.GetSampleSum(), ttft.GetSampleCount(), ttft.GetSampleCountFloat())
			}
		})
	}
}

func TestScrapeErrors(t *testing.T) {
	text := readTestdata(t, "vllm.prom")
	tests := []struct {
		name       string
		status     int
		header     http.Header
		body       []byte
		wantReason string
		wantErrIs  error
	}{
		{"500", 500, nil, []byte("boom"), ReasonHTTPStatus, nil},
		{"404", 404, nil, nil, ReasonHTTPStatus, nil},
		{"garbage", 200, http.Header{"Content-Type": {ctText}}, []byte("<html><body>not metrics</body></html>\n"), ReasonParse, nil},
		{"openmetrics without EOF", 200, http.Header{"Content-Type": {ctOM}}, []byte("# TYPE up gauge\nup 1\n"), ReasonParse, nil},
		{"bad gzip", 200, http.Header{"Content-Encoding": {"gzip"}}, []byte("not gzip at all"), ReasonParse, nil},
		{"truncated gzip", 200, http.Header{"Content-Encoding": {"gzip"}}, gzipBytes(t, text)[:100], ReasonParse, nil},
		{"unknown encoding", 200, http.Header{"Content-Encoding": {"br"}}, text, ReasonParse, nil},
		{"over cap", 200, nil, text, ReasonTooLarge, ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, _ := serve(t, tt.status, tt.header, tt.body)
			url := srv.URL + "/metrics"
			_, err := New(Config{MaxBytes: 1024}).Scrape(t.Context(), url)
			if err == nil {
				t.Fatal("Scrape succeeded, want error")
			}
			if got := Reason(err); got != tt.wantReason {
				t.Errorf("Reason = %q, want %q (err: %v)", got, tt.wantReason, err)
			}
			if !strings.Contains(err.Error(), url) {
				t.Errorf("error %q does not name %s", err, url)
			}
			if tt.wantErrIs != nil && !errors.Is(err, tt.wantErrIs) {
				t.Errorf("error %v is not %v", err, tt.wantErrIs)
			}
			var se *StatusError
			if tt.wantReason == ReasonHTTPStatus && (!errors.As(err, &se) || se.Code != tt.status) {
				t.Errorf("error %v does not carry status %d", err, tt.status)
			}
		})
	}
}

func TestScrapeParseErrorIsShort(t *testing.T) {
	body := []byte("metric " + strings.Repeat("x", 16<<10) + "\n")
	srv, _ := serve(t, 200, nil, body)
	_, err := New(Config{}).Scrape(t.Context(), srv.URL)
	if Reason(err) != ReasonParse {
		t.Fatalf("Reason = %q, want parse (err: %.200v)", Reason(err), err)
	}
	if n := len(err.Error()); n > 1024 {
		t.Errorf("error message is %d bytes long", n)
	}
}

func TestScrapeConnect(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	_, err := New(Config{}).Scrape(t.Context(), url)
	if got := Reason(err); got != ReasonConnect {
		t.Errorf("Reason = %q, want connect (err: %v)", got, err)
	}
}

func TestScrapeTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never answers; only the client's deadline ends this
	}))
	t.Cleanup(srv.Close)
	const timeout = 50 * time.Millisecond
	start := time.Now()
	_, err := New(Config{Timeout: timeout}).Scrape(t.Context(), srv.URL)
	if got := Reason(err); got != ReasonTimeout {
		t.Errorf("Reason = %q, want timeout (err: %v)", got, err)
	}
	if elapsed := time.Since(start); elapsed < timeout {
		t.Errorf("gave up after %v, before the %v timeout", elapsed, timeout)
	}
}

// TestScrapeTimeoutMidBody covers a server that answers at once, then stalls.
func TestScrapeTimeoutMidBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "# TYPE up gauge\nup 1\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	_, err := New(Config{Timeout: 50 * time.Millisecond}).Scrape(t.Context(), srv.URL)
	if got := Reason(err); got != ReasonTimeout {
		t.Errorf("Reason = %q, want timeout (err: %v)", got, err)
	}
}

func TestScrapeCanceled(t *testing.T) {
	started := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-started
		cancel()
	}()
	_, err := New(Config{Timeout: time.Minute}).Scrape(ctx, srv.URL)
	if got := Reason(err); got != ReasonCanceled {
		t.Errorf("Reason = %q, want canceled (err: %v)", got, err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v is not context.Canceled", err)
	}
}
