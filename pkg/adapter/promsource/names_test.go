package promsource

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/pkg/provider"
)

// TestDefaultsForNames: the defaults built for the names a server has ask
// for those alone, an engine's or a schema's, and read as the
// documentation shows them where the names are unknown or none is there.
func TestDefaultsForNames(t *testing.T) {
	all := DefaultQueries()
	for _, tc := range []struct {
		name   string
		has    map[string]bool
		metric string
		want   string // the pods query; "" for the documented default
	}{
		{"unknown: every name", nil, provider.QueueDepth, ""},
		{"none there: every name", map[string]bool{}, provider.QueueDepth, ""},
		{"a name of no query: every name", map[string]bool{"up": true}, provider.QueueDepth, ""},
		{"vLLM only", map[string]bool{"vllm:num_requests_waiting": true}, provider.QueueDepth,
			`sum by (namespace, pod) (vllm:num_requests_waiting{namespace="{{.Namespace}}", pod=~"{{.PodRegex}}"{{.ModelMatch "model_name"}}})`},
		{"two engines, in the table's order", map[string]bool{"tgi_queue_size": true, "vllm:num_requests_waiting": true}, provider.QueueDepth,
			`sum by (namespace, pod) (vllm:num_requests_waiting{namespace="{{.Namespace}}", pod=~"{{.PodRegex}}"{{.ModelMatch "model_name"}}} or on (namespace, pod) tgi_queue_size{namespace="{{.Namespace}}", pod=~"{{.PodRegex}}"{{.ModelMatch "model_name"}}})`},
		{"vLLM's newer KV name only", map[string]bool{"vllm:kv_cache_usage_perc": true}, provider.KVCacheUtilization,
			`100 * avg by (namespace, pod) (vllm:kv_cache_usage_perc{namespace="{{.Namespace}}", pod=~"{{.PodRegex}}"{{.ModelMatch "model_name"}}})`},
		{"dcgm-exporter 4.8's schema only", map[string]bool{"DCGM_FI_DEV_GPU_UTIL": true}, provider.GPUUtilization,
			`avg by (namespace, pod) ((DCGM_FI_DEV_GPU_UTIL{namespace="{{.Namespace}}", pod=~"{{.PodRegex}}"}))`},
		{"dcgm-exporter 4.10's schema only", map[string]bool{"DCGM_FI_DEV_GPU_UTIL_RATIO": true}, provider.GPUUtilization,
			`avg by (namespace, pod) ((100 * DCGM_FI_DEV_GPU_UTIL_RATIO{namespace="{{.Namespace}}", pod=~"{{.PodRegex}}"}))`},
		{"histograms by their buckets", map[string]bool{"vllm:time_to_first_token_seconds_bucket": true}, provider.TTFTP90,
			`histogram_quantile({{.Quantile}}, sum by (namespace, pod, le) (rate(vllm:time_to_first_token_seconds_bucket{namespace="{{.Namespace}}", pod=~"{{.PodRegex}}"{{.ModelMatch "model_name"}}}[{{.Window}}])))`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.want
			if want == "" {
				want = all.Pods[tc.metric]
			}
			if got := (names{has: tc.has}).defaults().Pods[tc.metric]; got != want {
				t.Errorf("pods query for %s:\n got %s\nwant %s", tc.metric, got, want)
			}
		})
	}
}

// TestDefaultNames: the names the probe asks about are every series the
// defaults read, histograms by their buckets.
func TestDefaultNames(t *testing.T) {
	got := defaultNames()
	for _, n := range []string{"vllm:num_requests_waiting", "sglang:num_queue_reqs", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO",
		"vllm:time_to_first_token_seconds_bucket", "nv_inference_first_response_histogram_ms_bucket", "vllm:gpu_cache_usage_perc"} {
		if !slices.Contains(got, n) {
			t.Errorf("defaultNames() lacks %s", n)
		}
	}
	text, _ := json.Marshal(DefaultQueries())
	for _, n := range got {
		if !strings.Contains(string(text), n) {
			t.Errorf("defaultNames() has %s, which no default reads", n)
		}
	}
}

// TestSourceAsksForNames: through a Source's lists, the server is asked
// for its names once per NamesEvery, in the background, and the queries
// after its answer read the names it has; a name it sends that no default
// reads is ignored, and a failed probe leaves every name in the queries.
func TestSourceAsksForNames(t *testing.T) {
	pods := []*corev1.Pod{pod("ml", "a", true)}
	queue := metric(t, provider.QueueDepth)
	full := `sum by (namespace, pod) (vllm:num_requests_waiting{namespace="ml", pod=~"a"} or on (namespace, pod) sglang:num_queue_reqs{namespace="ml", pod=~"a"} or on (namespace, pod) tgi_queue_size{namespace="ml", pod=~"a"} or on (namespace, pod) nv_inference_pending_request_count{namespace="ml", pod=~"a"})`
	vllmOnly := `sum by (namespace, pod) (vllm:num_requests_waiting{namespace="ml", pod=~"a"})`
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   string
		// the probe's result and the names counted
		result string
		names  float64
	}{
		{"answered", 200, `{"status":"success","data":["vllm:num_requests_waiting","node_cpu_seconds_total"]}`, vllmOnly, "ok", 1},
		{"server error", 500, `{"status":"error","errorType":"internal","error":"boom"}`, full, "error", 0},
		{"not JSON", 200, `<html>`, full, "error", 0},
		{"no name of ours", 200, `{"status":"success","data":["up"]}`, full, "ok", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeProm(t)
			var match, start, end atomic.Value
			f.names = func(m, s, e string) (int, string) {
				match.Store(m)
				start.Store(s)
				end.Store(e)
				return tc.status, tc.body
			}
			// Each list a second later: identical queries at one instant
			// would share an answer.
			var ticks atomic.Int64
			now := func() time.Time { return t0.Add(time.Duration(ticks.Load()) * time.Second) }
			s, err := New(Config{URL: f.URL, Timeout: time.Second, MaxStaleness: 15 * time.Second, TTFTWindow: time.Minute,
				Now: now, NamesEvery: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			list := func() string {
				t.Helper()
				ticks.Add(1)
				if _, err := s.Pods(context.Background(), provider.NewPodSet("ml", pods), queue, labels.Everything()); err != nil {
					t.Fatal(err)
				}
				reqs := f.take()
				if len(reqs) != 1 {
					t.Fatalf("%d queries, want 1", len(reqs))
				}
				return reqs[0].query
			}
			// The first list asks for the names; its queries may be
			// rendered before or after the answer.
			list()
			waitFor(t, func() bool {
				s.names.mu.Lock()
				defer s.names.mu.Unlock()
				return f.asks() == 1 && !s.names.inFlight
			})
			if m, _ := match.Load().(string); !strings.HasPrefix(m, `{__name__=~"`) || !strings.Contains(m, `vllm:num_requests_waiting|`) {
				t.Errorf("match[] = %q, want a regex of the defaults' names", m)
			}
			if st, _ := start.Load().(string); st != formatUnix(t0.Add(time.Second-namesLookback)) {
				t.Errorf("start = %q, want %s", st, formatUnix(t0.Add(time.Second-namesLookback)))
			}
			if q := list(); q != tc.want {
				t.Errorf("list after the answer:\n got %s\nwant %s", q, tc.want)
			}
			if got := testutil.ToFloat64(s.names.metrics.probes.WithLabelValues(tc.result)); got != 1 {
				t.Errorf("probes with result %q: %v, want 1", tc.result, got)
			}
			if got := testutil.ToFloat64(s.names.metrics.has); got != tc.names {
				t.Errorf("series names counted: %v, want %v", got, tc.names)
			}
			if f.asks() != 1 {
				t.Errorf("asked %d times within NamesEvery, want once", f.asks())
			}
			ticks.Add(60)
			list()
			waitFor(t, func() bool { return f.asks() == 2 })
		})
	}
}

func (f *fakeProm) asks() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nameAsks
}

// formatUnix is a time as client_golang's API sends it.
func formatUnix(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

// waitFor polls cond for up to 5 s, failing the test if it never holds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
