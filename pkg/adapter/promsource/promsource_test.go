package promsource

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/pkg/provider"
)

func metric(t *testing.T, name string) provider.Metric {
	t.Helper()
	m, ok := provider.MetricByName(name)
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	return m
}

// TestQueries asserts the exact PromQL of each shape, one query per call.
func TestQueries(t *testing.T) {
	llama, _ := labels.Parse("model_name=llama")
	pods := []*corev1.Pod{pod("ml", "a", true), pod("ml", "b.c", true)}
	cases := []struct {
		name string
		call func(*Source) error
		want string
	}{
		{"pods star, queue depth", func(s *Source) error {
			_, err := s.Pods(context.Background(), provider.NewPodSet("ml", pods), metric(t, provider.QueueDepth), labels.Everything())
			return err
		}, `sum by (namespace, pod) (vllm:num_requests_waiting{namespace="ml", pod=~"a|b\\.c"} or on (namespace, pod) sglang:num_queue_reqs{namespace="ml", pod=~"a|b\\.c"} or on (namespace, pod) tgi_queue_size{namespace="ml", pod=~"a|b\\.c"} or on (namespace, pod) nv_inference_pending_request_count{namespace="ml", pod=~"a|b\\.c"})`},
		{"one pod, gpu utilization", func(s *Source) error {
			_, err := s.Pods(context.Background(), provider.NewPodSet("ml", pods[:1]), metric(t, provider.GPUUtilization), nil)
			return err
		}, `avg by (namespace, pod) ((DCGM_FI_DEV_GPU_UTIL{namespace="ml", pod=~"a"} or 100 * DCGM_FI_DEV_GPU_UTIL_RATIO{namespace="ml", pod=~"a"}))`},
		{"metric selector on the model", func(s *Source) error {
			_, err := s.Pods(context.Background(), provider.NewPodSet("ml", pods[:1]), metric(t, provider.QueueDepth), llama)
			return err
		}, `sum by (namespace, pod) (vllm:num_requests_waiting{namespace="ml", pod=~"a", model_name="llama"} or on (namespace, pod) sglang:num_queue_reqs{namespace="ml", pod=~"a", model_name="llama"} or on (namespace, pod) tgi_queue_size{namespace="ml", pod=~"a", model_name="llama"} or on (namespace, pod) nv_inference_pending_request_count{namespace="ml", pod=~"a", model="llama"})`},
		{"pod ttft p90", func(s *Source) error {
			_, err := s.Pods(context.Background(), provider.NewPodSet("ml", pods[:1]), metric(t, provider.TTFTP90), nil)
			return err
		}, `histogram_quantile(0.9, sum by (namespace, pod, le) (rate(vllm:time_to_first_token_seconds_bucket{namespace="ml", pod=~"a"}[1m]) or on (namespace, pod) rate(sglang:time_to_first_token_seconds_bucket{namespace="ml", pod=~"a"}[1m]))) or histogram_quantile(0.9, sum by (namespace, pod, le) (rate(nv_inference_first_response_histogram_ms_bucket{namespace="ml", pod=~"a"}[1m]))) / 1000`},
		{"deployment ttft p99: merged buckets", func(s *Source) error {
			_, _, err := s.Workload(context.Background(), "ml", pods, metric(t, provider.TTFTP99), nil)
			return err
		}, `histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{namespace="ml", pod=~"a|b\\.c"}[1m]) or on (namespace, pod) rate(sglang:time_to_first_token_seconds_bucket{namespace="ml", pod=~"a|b\\.c"}[1m]))) or histogram_quantile(0.99, sum by (le) (rate(nv_inference_first_response_histogram_ms_bucket{namespace="ml", pod=~"a|b\\.c"}[1m]))) / 1000`},
		{"deployment kv cache: per-pod query", func(s *Source) error {
			_, _, err := s.Workload(context.Background(), "ml", pods, metric(t, provider.KVCacheUtilization), nil)
			return err
		}, `100 * avg by (namespace, pod) (vllm:kv_cache_usage_perc{namespace="ml", pod=~"a|b\\.c"} or on (namespace, pod) vllm:gpu_cache_usage_perc{namespace="ml", pod=~"a|b\\.c"} or on (namespace, pod) sglang:token_usage{namespace="ml", pod=~"a|b\\.c"})`},
		{"nodes", func(s *Source) error {
			_, err := s.Nodes(context.Background(), []string{"gpu-1", "gpu-2"}, metric(t, provider.GPUUtilization))
			return err
		}, `avg by (Hostname) (max by (Hostname, UUID) (((DCGM_FI_DEV_GPU_UTIL{Hostname=~"gpu-1|gpu-2", GPU_I_ID=""} or label_replace(DCGM_FI_DEV_GPU_UTIL{Hostname="", hostname=~"gpu-1|gpu-2", GPU_I_ID=""}, "Hostname", "$1", "hostname", "(.*)")) or 100 * (DCGM_FI_DEV_GPU_UTIL_RATIO{Hostname=~"gpu-1|gpu-2", GPU_I_ID=""} or label_replace(DCGM_FI_DEV_GPU_UTIL_RATIO{Hostname="", hostname=~"gpu-1|gpu-2", GPU_I_ID=""}, "Hostname", "$1", "hostname", "(.*)"))) unless on (UUID) gpuscale_gpu_shared) or sum by (Hostname, UUID) (((DCGM_FI_DEV_GPU_UTIL{Hostname=~"gpu-1|gpu-2", GPU_I_ID=""} or label_replace(DCGM_FI_DEV_GPU_UTIL{Hostname="", hostname=~"gpu-1|gpu-2", GPU_I_ID=""}, "Hostname", "$1", "hostname", "(.*)")) or 100 * (DCGM_FI_DEV_GPU_UTIL_RATIO{Hostname=~"gpu-1|gpu-2", GPU_I_ID=""} or label_replace(DCGM_FI_DEV_GPU_UTIL_RATIO{Hostname="", hostname=~"gpu-1|gpu-2", GPU_I_ID=""}, "Hostname", "$1", "hostname", "(.*)"))) and on (UUID) gpuscale_gpu_shared))`},
		{"external queue depth by model", func(s *Source) error {
			_, err := s.Models(context.Background(), "ml", pods, metric(t, provider.QueueDepth), llama)
			return err
		}, `sum by (model_name) (vllm:num_requests_waiting{namespace="ml", pod=~"a|b\\.c", model_name="llama"} or on (namespace, pod) sglang:num_queue_reqs{namespace="ml", pod=~"a|b\\.c", model_name="llama"} or on (namespace, pod) label_replace(nv_inference_pending_request_count{namespace="ml", pod=~"a|b\\.c", model="llama"}, "model_name", "$1", "model", "(.+)") or on (namespace, pod) label_replace(inference_extension_flow_control_queue_size{namespace="ml", pod=~"a|b\\.c", target_model_name="llama"}, "model_name", "$1", "target_model_name", "(.+)") or on (namespace, pod) label_replace(dynamo_frontend_queued_requests{namespace="ml", pod=~"a|b\\.c", model="llama"}, "model_name", "$1", "model", "(.+)"))`},
	}
	f := newFakeProm(t)
	s := newSource(t, f)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(s); err != nil {
				t.Fatal(err)
			}
			reqs := f.take()
			if len(reqs) != 1 {
				t.Fatalf("%d queries, want 1", len(reqs))
			}
			if reqs[0].query != tc.want {
				t.Errorf("query\n got %s\nwant %s", reqs[0].query, tc.want)
			}
			if reqs[0].lookback != "15s" || reqs[0].timeout != "1s" {
				t.Errorf("lookback_delta %q timeout %q, want 15s and 1s", reqs[0].lookback, reqs[0].timeout)
			}
		})
	}
}

// TestResults checks how answers are read: keyed by their label, NaN and
// infinities are no value, workload scalars aggregate like the embedded
// source, models without a name are dropped.
func TestResults(t *testing.T) {
	f := newFakeProm(t)
	s := newSource(t, f)
	ctx := context.Background()
	pods := []*corev1.Pod{pod("ml", "a", true), pod("ml", "b", true), pod("ml", "c", true)}
	f.setReply(func(string) (int, string) {
		return 200, vector(t0, series{podLabels("a"), "2"}, series{podLabels("b"), "5"}, series{podLabels("c"), "NaN"})
	})
	vals, err := s.Pods(ctx, provider.NewPodSet("ml", pods), metric(t, provider.QueueDepth), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(vals) != 3 || vals[0].V != 2 || vals[1].V != 5 || !vals[0].Time.Equal(t0) || !vals[1].Valid() || vals[2].Valid() {
		t.Errorf("pods = %+v, want a=2, b=5 at the query time, no c", vals)
	}
	for _, tc := range []struct {
		metric string
		want   float64
	}{{provider.QueueDepth, 7}, {provider.KVCacheUtilization, 3.5}} {
		v, ok, err := s.Workload(ctx, "ml", pods, metric(t, tc.metric), nil)
		if err != nil || !ok || v.V != tc.want {
			t.Errorf("workload %s = %v, %v, %v; want %v", tc.metric, v, ok, err, tc.want)
		}
	}
	f.setReply(func(string) (int, string) { return 200, vector(t0, series{map[string]string{}, "NaN"}) })
	if _, ok, err := s.Workload(ctx, "ml", pods, metric(t, provider.TTFTP90), nil); ok || err != nil {
		t.Errorf("NaN quantile: ok=%v err=%v, want no value", ok, err)
	}
	f.setReply(func(string) (int, string) {
		return 200, vector(t0, series{map[string]string{"model_name": "llama"}, "4"}, series{map[string]string{}, "9"},
			series{map[string]string{"model_name": "mistral"}, "+Inf"})
	})
	models, err := s.Models(ctx, "ml", pods, metric(t, provider.QueueDepth), nil)
	if err != nil || len(models) != 1 || models["llama"].V != 4 {
		t.Errorf("models = %+v, %v; want llama=4 only", models, err)
	}
	f.setReply(func(string) (int, string) {
		return 200, vector(t0, series{map[string]string{"Hostname": "gpu-1"}, "55"})
	})
	nodes, err := s.Nodes(ctx, []string{"gpu-1", "gpu-2"}, metric(t, provider.GPUUtilization))
	if err != nil || len(nodes) != 1 || nodes["gpu-1"].V != 55 {
		t.Errorf("nodes = %+v, %v", nodes, err)
	}
}

// TestPodsAligned: Pods answers one value per asked pod, in the asked
// order whatever the order of Prometheus's result; a pod it did not answer
// for has the zero Value, a pod it was not asked about is dropped, and a pod
// asked twice gets its value twice.
func TestPodsAligned(t *testing.T) {
	f := newFakeProm(t)
	s := newSource(t, f)
	f.setReply(func(string) (int, string) {
		return 200, vector(t0, series{podLabels("c"), "3"}, series{podLabels("stranger"), "9"}, series{podLabels("a"), "1"})
	})
	pods := []*corev1.Pod{pod("ml", "a", true), pod("ml", "b", true), pod("ml", "c", true), pod("ml", "a", true)}
	vals, err := s.Pods(context.Background(), provider.NewPodSet("ml", pods), metric(t, provider.QueueDepth), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{1, -1, 3, 1} // -1: no value
	if len(vals) != len(want) {
		t.Fatalf("%d values for %d pods", len(vals), len(want))
	}
	for i, w := range want {
		if got := vals[i]; (w < 0) == got.Valid() || (w >= 0 && (got.V != w || !got.Time.Equal(t0))) {
			t.Errorf("pod %d (%s) = %+v, want %v", i, pods[i].Name, got, w)
		}
	}
}

// TestBatching: a pod list too long for one query is split into as few
// queries as fit, each within the limit, covering every pod once; values
// that cannot be merged from split queries are an error, not a guess.
func TestBatching(t *testing.T) {
	f := newFakeProm(t)
	s := newSource(t, f)
	var pods []*corev1.Pod
	for i := range 2000 {
		pods = append(pods, pod("ml", "llm-7d9f8b6c5-"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+strconv.Itoa(i), true))
	}
	ctx := context.Background()
	if _, err := s.Pods(ctx, provider.NewPodSet("ml", pods), metric(t, provider.QueueDepth), nil); err != nil {
		t.Fatal(err)
	}
	reqs := f.take()
	if len(reqs) < 2 {
		t.Fatalf("%d queries for 2000 pods, want a split", len(reqs))
	}
	seen := map[string]int{}
	for _, r := range reqs {
		if len(r.query) > DefaultMaxQueryBytes {
			t.Errorf("query of %d bytes, limit %d", len(r.query), DefaultMaxQueryBytes)
		}
		re := between(r.query, `pod=~"`, `"`)
		for _, n := range strings.Split(re, "|") {
			seen[n]++
		}
	}
	for _, p := range pods {
		if seen[p.Name] != 1 {
			t.Fatalf("pod %s in %d queries, want 1", p.Name, seen[p.Name])
		}
	}
	short := 0 // the split queries run in parallel: any may be the last
	for _, r := range reqs {
		if len(r.query) < DefaultMaxQueryBytes*9/10 {
			short++
		}
	}
	if short > 1 {
		t.Errorf("%d of %d queries under 90%% of the limit: batches are not filled", short, len(reqs))
	}
	if _, _, err := s.Workload(ctx, "ml", pods, metric(t, provider.TTFTP90), nil); !errors.Is(err, errSplit) {
		t.Errorf("split TTFT: err = %v, want errSplit", err)
	}
	if n := len(f.take()); n != 0 {
		t.Errorf("split TTFT sent %d queries, want none", n)
	}
}

func between(s, from, to string) string {
	i := strings.Index(s, from)
	if i < 0 {
		return ""
	}
	s = s[i+len(from):]
	return s[:strings.Index(s, to)]
}

// TestErrors: an erroring, slow or unreachable Prometheus is a clear error
// naming it, and the next call after it recovers succeeds.
func TestErrors(t *testing.T) {
	f := newFakeProm(t)
	s, err := New(Config{URL: f.URL, Timeout: 100 * time.Millisecond, MaxStaleness: 15 * time.Second, TTFTWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pods := []*corev1.Pod{pod("ml", "a", true)}
	ask := func() ([]provider.Value, error) {
		return s.Pods(ctx, provider.NewPodSet("ml", pods), metric(t, provider.QueueDepth), nil)
	}
	block := make(chan struct{})
	defer close(block)
	for _, tc := range []struct {
		name  string
		reply func(string) (int, string)
		want  string
	}{
		{"bad query", func(string) (int, string) {
			return 400, `{"status":"error","errorType":"bad_data","error":"parse error"}`
		}, "parse error"},
		{"server error", func(string) (int, string) { return 503, `service unavailable` }, "503"},
		{"timeout", func(string) (int, string) { <-block; return 200, vector(t0) }, "deadline exceeded"},
		{"not a vector", func(string) (int, string) {
			return 200, `{"status":"success","data":{"resultType":"scalar","result":[1,"1"]}}`
		}, "want an instant vector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.setReply(tc.reply)
			_, err := ask()
			if err == nil || !strings.Contains(err.Error(), "query prometheus at "+f.URL) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to name %s and say %q", err, f.URL, tc.want)
			}
		})
	}
	f.setReply(func(string) (int, string) { return 200, vector(t0, series{podLabels("a"), "3"}) })
	if vals, err := ask(); err != nil || len(vals) != 1 || vals[0].V != 3 {
		t.Fatalf("after recovery: %v, %v", vals, err)
	}
	down, err := New(Config{URL: "http://127.0.0.1:1", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := down.Pods(ctx, provider.NewPodSet("ml", pods), metric(t, provider.QueueDepth), nil); err == nil || !strings.Contains(err.Error(), "query prometheus at http://127.0.0.1:1") {
		t.Fatalf("unreachable: err = %v", err)
	}
}

func TestNewRejects(t *testing.T) {
	for _, u := range []string{"", "prometheus:9090", "://x"} {
		if _, err := New(Config{URL: u}); err == nil {
			t.Errorf("New(%q) succeeded", u)
		}
	}
}

func TestQuantileParam(t *testing.T) {
	p, err := (&Source{cfg: Config{TTFTWindow: 90 * time.Second}}).params("a\"b", provider.Metric{Quantile: 0.99}, nil)
	if err != nil || p.Quantile != "0.99" || p.Window != "1m30s" || p.Namespace != `a\"b` {
		t.Errorf("params = %+v, %v", p, err)
	}
}

// BenchmarkPods10k is the HPA's Pods-metric call over 10,000 ready pods:
// building the batched queries and reading 10,000 results from a local
// fake API.
func BenchmarkPods10k(b *testing.B) {
	t := &testing.T{}
	f := newFakeProm(t)
	defer f.Close()
	var pods []*corev1.Pod
	for i := range 10000 {
		pods = append(pods, pod("ml", "llm-7d9f8b6c5-"+strconv.Itoa(100000+i), true))
	}
	// Like Prometheus, answer for the pods of the query's regex only.
	bodies := map[string]string{}
	f.setReply(func(q string) (int, string) {
		re := between(q, `pod=~"`, `"`)
		if body, ok := bodies[re]; ok {
			return 200, body
		}
		var res []series
		for _, n := range strings.Split(re, "|") {
			res = append(res, series{podLabels(n), "3"})
		}
		bodies[re] = vector(t0, res...)
		return 200, bodies[re]
	})
	s := newSource(t, f)
	m, _ := provider.MetricByName(provider.QueueDepth)
	b.ReportAllocs()
	for b.Loop() {
		vals, err := s.Pods(context.Background(), provider.NewPodSet("ml", pods), m, nil)
		if err != nil || len(vals) != 10000 || !vals[9999].Valid() {
			b.Fatalf("%d values, %v", len(vals), err)
		}
	}
	b.ReportMetric(float64(len(f.take()))/float64(b.N), "queries/op")
}
