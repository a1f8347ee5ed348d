package promapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// server answers every query with status and body.
func server(t testing.TB, status int, body string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func client(t testing.TB, url string, maxBytes int64) *Client {
	t.Helper()
	c, err := New(Config{URL: url, Timeout: time.Second, MaxResponseBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func vector(samples ...string) string {
	return `{"status":"success","data":{"resultType":"vector","result":[` + strings.Join(samples, ",") + `]}}`
}

func sample(pod, value string) string {
	return fmt.Sprintf(`{"metric":{"pod":%q},"value":[%d,%q]}`, pod, t0.Unix(), value)
}

func TestEach(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		status     int
		max        int64
		want       map[string]float64
		wantErr    string
	}{
		{name: "finite kept", status: 200, body: vector(sample("a", "2"), sample("b", "NaN"), sample("c", "+Inf"), sample("d", "-1.5")),
			want: map[string]float64{"a": 2, "d": -1.5}},
		{name: "empty vector", status: 200, body: vector(), want: map[string]float64{}},
		{name: "matrix", status: 200, body: `{"status":"success","data":{"resultType":"matrix","result":[]}}`, wantErr: "want an instant vector"},
		{name: "no data", status: 200, body: `{"status":"success"}`, wantErr: "query prometheus"},
		{name: "empty answer", status: 277, body: `{}`, wantErr: "query prometheus"},
		{name: "query error", status: 422, body: `{"status":"error","errorType":"execution","error":"many-to-many matching not allowed"}`, wantErr: "many-to-many"},
		{name: "proxy page", status: 503, body: `<html>proxy error</html>`, wantErr: "query prometheus"},
		{name: "over the cap", status: 200, body: vector(sample("a", "2"), sample(strings.Repeat("x", 4<<10), "5")), max: 1 << 10, wantErr: "query prometheus"},
		{name: "escapes and unicode", status: 200, body: vector(sample("a\"b\\c\u00e9 🦙", "1e3")), want: map[string]float64{"a\"b\\c\u00e9 🦙": 1000}},
		{name: "bad request", status: 400, body: `{"status":"error","errorType":"bad_data","error":"parse error at char 3"}`, wantErr: "bad_data: parse error at char 3"},
		{name: "unavailable", status: 503, body: `{"status":"error","errorType":"unavailable","error":"too many queries"}`, wantErr: "server_error: server error: 503"},
		{name: "error with 200", status: 200, body: `{"status":"error","errorType":"timeout","error":"query timed out"}`, wantErr: "timeout: query timed out"},
		{name: "success with 422", status: 422, body: vector(sample("a", "1")), wantErr: "inconsistent body"},
		{name: "no content", status: 204, body: ``, wantErr: "holds no result"},
		{name: "empty body", status: 200, body: ``, wantErr: "not valid JSON"},
		{name: "not JSON", status: 200, body: `<html>ok</html>`, wantErr: "not valid JSON"},
		{name: "truncated", status: 200, body: vector(sample("a", "1"))[:60], wantErr: "not valid JSON"},
		{name: "trailing garbage", status: 200, body: vector(sample("a", "1")) + "x", wantErr: "not valid JSON"},
		{name: "no status", status: 200, body: `{"data":{"resultType":"vector","result":[]}}`, wantErr: "want success or error"},
		{name: "scalar", status: 200, body: `{"status":"success","data":{"resultType":"scalar","result":[1,"1"]}}`, wantErr: "want an instant vector"},
		{name: "no value", status: 200, body: vector(`{"metric":{"pod":"a"}}`), wantErr: "has no value"},
		{name: "histogram", status: 200, body: vector(`{"metric":{"pod":"a"},"histogram":[1,{"count":"1"}]}`), wantErr: "native histogram"},
		{name: "value not a string", status: 200, body: vector(`{"metric":{"pod":"a"},"value":[1,1]}`), wantErr: "not a string"},
		{name: "value not a number", status: 200, body: vector(sample("a", "one")), wantErr: "invalid syntax"},
		{name: "time in a string", status: 200, body: vector(`{"metric":{"pod":"a"},"value":["1","1"]}`), wantErr: "not a number"},
		{name: "null label", status: 200, body: vector(`{"metric":{"pod":null},"value":[1,"1"]}`), wantErr: "is null"},
		{name: "one bad sample", status: 200, body: vector(sample("a", "1"), `{"metric":{"pod":"b"},"value":[1]}`), wantErr: "not a [time, value] pair"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := client(t, server(t, tc.status, tc.body).URL, tc.max)
			got := map[string]float64{}
			err := c.Each(context.Background(), "up", t0, "pod", func(k string, v float64, at time.Time) {
				got[k] = v
				if !at.Equal(t0) {
					t.Errorf("%s: sample time %v, want %v", k, at, t0)
				}
			})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Each: %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("Each = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestLookbackParameters: --max-staleness reaches the server's lookback
// under both names, Prometheus' lookback_delta and VictoriaMetrics'
// max_lookback (VictoriaMetrics ignores lookback_delta and would
// otherwise use a lookback of its own), whether the client POSTs the
// query or falls back to GET; with no staleness bound, neither is sent.
func TestLookbackParameters(t *testing.T) {
	for _, tc := range []struct {
		name               string
		staleness          time.Duration
		postRefused        bool
		refusal            int // the POST's status, 405 unless set
		wantDelta, wantMax string
	}{
		{name: "POST", staleness: 3 * time.Second, wantDelta: "3s", wantMax: "3"},
		{name: "GET fallback on 501", staleness: time.Second, postRefused: true, refusal: http.StatusNotImplemented, wantDelta: "1s", wantMax: "1"},
		{name: "GET fallback on 403", staleness: time.Second, postRefused: true, refusal: http.StatusForbidden, wantDelta: "1s", wantMax: "1"},
		{name: "GET fallback", staleness: 1500 * time.Millisecond, postRefused: true, wantDelta: "1.5s", wantMax: "1.5"},
		{name: "no bound", staleness: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var got []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.postRefused && r.Method == http.MethodPost {
					w.WriteHeader(cmp.Or(tc.refusal, http.StatusMethodNotAllowed))
					return
				}
				mu.Lock()
				got = append(got, r.Method+" "+r.FormValue("query")+" lookback_delta="+r.FormValue("lookback_delta")+" max_lookback="+r.FormValue("max_lookback"))
				if r.FormValue("time") != "1796040000" || r.FormValue("timeout") != "1s" {
					t.Errorf("time=%q timeout=%q, want 1796040000 and 1s", r.FormValue("time"), r.FormValue("timeout"))
				}
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, vector(sample("a", "1")))
			}))
			t.Cleanup(srv.Close)
			c, err := New(Config{URL: srv.URL, Timeout: time.Second, MaxStaleness: tc.staleness})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Vector(context.Background(), "up", t0); err != nil {
				t.Fatal(err)
			}
			method := http.MethodPost
			if tc.postRefused {
				method = http.MethodGet
			}
			want := method + " up lookback_delta=" + tc.wantDelta + " max_lookback=" + tc.wantMax
			if len(got) != 1 || got[0] != want {
				t.Errorf("server saw %q, want [%q]", got, want)
			}
		})
	}
}

// TestVectorGivesUp: a query ends at its timeout, or when its caller
// gives up, with an error.
func TestVectorGivesUp(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	c, err := New(Config{URL: srv.URL, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Vector(context.Background(), "up", t0); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("past the timeout: %v, want a deadline error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	if _, err := c.Vector(ctx, "up", t0); !errors.Is(err, context.Canceled) {
		t.Errorf("given up: %v, want context.Canceled", err)
	}
}

func TestNewRefusesBadURL(t *testing.T) {
	for _, u := range []string{"", "prometheus:9090", "http://", "://x"} {
		if _, err := New(Config{URL: u}); err == nil {
			t.Errorf("New(%q) accepted it", u)
		}
	}
}

// FuzzEach: whatever a Prometheus-compatible server answers (any status,
// any body), Each neither panics nor hands on a value that is not a finite
// number.
func FuzzEach(f *testing.F) {
	f.Add(200, vector(sample("a", "2"), sample("b", "NaN")))
	f.Add(200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"model_name":"llama"},"value":[1,"+Inf"]},{"metric":{"Hostname":"gpu-1"},"value":[1,"-1e308"]}]}}`)
	f.Add(200, `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"1"]]}]}}`)
	f.Add(200, `{"status":"success","data":{"resultType":"scalar","result":[1,"1e400"]}}`)
	f.Add(200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"value":[1e300,"1"]}]}}`)
	f.Add(422, `{"status":"error","errorType":"execution","error":"many-to-many matching not allowed"}`)
	f.Add(503, `<html>proxy error</html>`)
	f.Add(200, `{"status":"success","data":{"resultType":"vector","result":[`)
	// Found by the fuzzer: a 2xx answer with no data decoded to a nil
	// value, and the source panicked naming its type.
	f.Add(277, `{}`)
	f.Add(200, `{"status":"success"}`)
	var (
		mu     sync.Mutex
		body   string
		status int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		st, b := status, body
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(st)
		fmt.Fprint(w, b)
	}))
	defer srv.Close()
	c := client(f, srv.URL, 1<<20)
	f.Fuzz(func(t *testing.T, st int, b string) {
		if st < 100 || st > 599 {
			st = 200
		}
		mu.Lock()
		status, body = st, b
		mu.Unlock()
		for _, key := range []string{"pod", "model_name", "Hostname", ""} {
			_ = c.Each(context.Background(), "q", t0, key, func(k string, v float64, _ time.Time) {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Errorf("key %q: handed on %v", k, v)
				}
			})
		}
	})
}

// TestLabelValues: the label values answer is read as any answer is:
// names as sent, bounded in size, within the timeout, and an error for
// whatever is not the API's answer.
func TestLabelValues(t *testing.T) {
	huge := `{"status":"success","data":["` + strings.Repeat("x", 4096) + `"]}`
	for _, tc := range []struct {
		name, body string
		status     int
		want       []string
	}{
		{"answered", `{"status":"success","data":["vllm:num_requests_waiting","up"]}`, 200, []string{"vllm:num_requests_waiting", "up"}},
		{"over the size bound", huge, 200, nil},
		{"not JSON", `<html>`, 200, nil},
		{"server error", `{"status":"error","errorType":"internal","error":"boom"}`, 500, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := client(t, server(t, tc.status, tc.body).URL, 1024)
			got, err := c.LabelValues(context.Background(), "__name__", `{__name__=~"a|b"}`, t0.Add(-time.Minute), t0)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("answer %q read as %v, want an error", tc.body[:min(len(tc.body), 40)], got)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	t.Run("hanging", func(t *testing.T) {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
		t.Cleanup(srv.Close)
		t.Cleanup(func() { close(release) })
		c, err := New(Config{URL: srv.URL, Timeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.LabelValues(context.Background(), "__name__", `{__name__="a"}`, t0, t0); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("past the timeout: %v, want a deadline error", err)
		}
	})
}
