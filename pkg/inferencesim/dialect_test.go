package inferencesim

import (
	"errors"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	clocktesting "k8s.io/utils/clock/testing"
)

// newTestServer serves a simulated server on 127.0.0.1 on a fake clock.
func newTestServer(t *testing.T, opts Options) (*Server, *clocktesting.FakeClock, *httptest.Server) {
	t.Helper()
	clock := clocktesting.NewFakeClock(t0)
	opts.Now = clock.Now
	s, err := NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return s, clock, hs
}

// scrape fetches /metrics with the given Accept header and parses it in
// the format the server answered with.
func scrape(t *testing.T, baseURL, accept string) (map[string]*dto.MetricFamily, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, baseURL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: status %d, err %v", resp.StatusCode, err)
	}
	fams := map[string]*dto.MetricFamily{}
	dec := expfmt.NewDecoder(strings.NewReader(string(body)), expfmt.ResponseFormat(resp.Header))
	for {
		mf := &dto.MetricFamily{}
		if err := dec.Decode(mf); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("parse /metrics: %v\n%s", err, body)
		}
		fams[mf.GetName()] = mf
	}
	return fams, string(body), resp.Header
}

// family describes one metric family a dialect must expose.
type family struct {
	name    string
	typ     dto.MetricType
	buckets []float64 // histograms only, without +Inf
	// value is the engine's figure: a gauge's or counter's value, a
	// histogram's count; nil when the engine has none to compare.
	value func(Stats) float64
	// labels, when set, replace the dialect's labels.
	labels map[string]string
}

type dialectCase struct {
	dialect  Dialect
	labels   map[string]string
	families []family
	// ttft is the TTFT family and its unit per second; empty for TGI.
	ttft      string
	ttftScale float64
}

func dialectCases() []dialectCase {
	model := map[string]string{"model_name": DefaultModel}
	waiting := func(s Stats) float64 { return float64(s.Waiting) }
	running := func(s Stats) float64 { return float64(s.Running) }
	kv := func(s Stats) float64 { return s.KVCacheUsage }
	completed := func(s Stats) float64 { return float64(s.Completed) }
	prompt := func(s Stats) float64 { return float64(s.PromptTokens) }
	generated := func(s Stats) float64 { return float64(s.GenerationTokens) }
	return []dialectCase{{
		dialect: VLLM,
		labels:  map[string]string{"model_name": DefaultModel, "engine": "0"},
		families: []family{
			{name: "vllm:num_requests_waiting", typ: dto.MetricType_GAUGE, value: waiting},
			{name: "vllm:num_requests_running", typ: dto.MetricType_GAUGE, value: running},
			{name: "vllm:kv_cache_usage_perc", typ: dto.MetricType_GAUGE, value: kv},
			{name: "vllm:time_to_first_token_seconds", typ: dto.MetricType_HISTOGRAM, buckets: []float64{0.001, 0.005,
				0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}},
			{name: "vllm:request_success_total", typ: dto.MetricType_COUNTER, value: completed},
			{name: "vllm:prompt_tokens_total", typ: dto.MetricType_COUNTER, value: prompt},
			{name: "vllm:generation_tokens_total", typ: dto.MetricType_COUNTER, value: generated},
			{name: "vllm:num_preemptions_total", typ: dto.MetricType_COUNTER, value: func(s Stats) float64 { return float64(s.Preemptions) }},
			// What a real vLLM scrape carries besides: the adapter
			// skips it, at a cost the benchmarks should see.
			{name: "vllm:e2e_request_latency_seconds", typ: dto.MetricType_HISTOGRAM, buckets: vllmRequestLatencyBuckets, value: completed},
			{name: "vllm:request_queue_time_seconds", typ: dto.MetricType_HISTOGRAM, buckets: vllmRequestLatencyBuckets, value: completed},
			{name: "vllm:request_inference_time_seconds", typ: dto.MetricType_HISTOGRAM, buckets: vllmRequestLatencyBuckets, value: completed},
			{name: "vllm:request_prefill_time_seconds", typ: dto.MetricType_HISTOGRAM, buckets: vllmRequestLatencyBuckets, value: completed},
			{name: "vllm:request_decode_time_seconds", typ: dto.MetricType_HISTOGRAM, buckets: vllmRequestLatencyBuckets, value: completed},
			{name: "vllm:time_per_output_token_seconds", typ: dto.MetricType_HISTOGRAM, buckets: vllmTokenLatencyBuckets},
			{name: "vllm:inter_token_latency_seconds", typ: dto.MetricType_HISTOGRAM, buckets: vllmTokenLatencyBuckets},
			{name: "vllm:request_prompt_tokens", typ: dto.MetricType_HISTOGRAM, buckets: vllmTokenCountBuckets, value: completed},
			{name: "vllm:request_generation_tokens", typ: dto.MetricType_HISTOGRAM, buckets: vllmTokenCountBuckets, value: completed},
			{name: "vllm:request_params_max_tokens", typ: dto.MetricType_HISTOGRAM, buckets: vllmTokenCountBuckets, value: completed},
			{name: "vllm:request_max_num_generation_tokens", typ: dto.MetricType_HISTOGRAM, buckets: vllmTokenCountBuckets, value: completed},
			{name: "vllm:request_params_n", typ: dto.MetricType_HISTOGRAM, buckets: vllmParamsNBuckets, value: completed},
			{name: "vllm:prefix_cache_queries_total", typ: dto.MetricType_COUNTER},
			{name: "vllm:prefix_cache_hits_total", typ: dto.MetricType_COUNTER, value: func(Stats) float64 { return 0 }},
			{name: "vllm:cache_config_info", typ: dto.MetricType_GAUGE, value: func(Stats) float64 { return 1 },
				labels: map[string]string{"block_size": "16", "cache_dtype": "auto", "enable_prefix_caching": "True",
					"gpu_memory_utilization": "0.9", "num_gpu_blocks": "27000", "swap_space": "4"}},
		},
		ttft: "vllm:time_to_first_token_seconds", ttftScale: 1,
	}, {
		dialect: SGLang,
		labels:  model,
		families: []family{
			{name: "sglang:num_queue_reqs", typ: dto.MetricType_GAUGE, value: waiting},
			{name: "sglang:num_running_reqs", typ: dto.MetricType_GAUGE, value: running},
			{name: "sglang:token_usage", typ: dto.MetricType_GAUGE, value: kv},
			{name: "sglang:time_to_first_token_seconds", typ: dto.MetricType_HISTOGRAM,
				buckets: []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400}},
			{name: "sglang:num_requests_total", typ: dto.MetricType_COUNTER, value: completed},
			{name: "sglang:prompt_tokens_total", typ: dto.MetricType_COUNTER, value: prompt},
			{name: "sglang:generation_tokens_total", typ: dto.MetricType_COUNTER, value: generated},
			{name: "sglang:inter_token_latency_seconds", typ: dto.MetricType_HISTOGRAM, buckets: sglangITLBuckets},
		},
		ttft: "sglang:time_to_first_token_seconds", ttftScale: 1,
	}, {
		dialect: TGI,
		labels:  map[string]string{},
		families: []family{
			{name: "tgi_queue_size", typ: dto.MetricType_GAUGE, value: waiting},
			{name: "tgi_batch_current_size", typ: dto.MetricType_GAUGE, value: running},
			{name: "tgi_request_queue_duration", typ: dto.MetricType_HISTOGRAM, buckets: tgiBuckets()},
			{name: "tgi_request_success", typ: dto.MetricType_COUNTER, value: completed},
			{name: "tgi_request_mean_time_per_token_duration", typ: dto.MetricType_HISTOGRAM, buckets: tgiBuckets()},
		},
	}, {
		dialect: Triton,
		labels:  map[string]string{"model": DefaultModel, "version": "1"},
		families: []family{
			{name: "nv_inference_pending_request_count", typ: dto.MetricType_GAUGE, value: waiting},
			{name: "nv_inference_first_response_histogram_ms", typ: dto.MetricType_HISTOGRAM, buckets: []float64{100, 500, 2000, 5000}},
			{name: "nv_inference_request_success", typ: dto.MetricType_COUNTER, value: completed},
			{name: "nv_inference_count", typ: dto.MetricType_COUNTER, value: completed},
		},
		ttft: "nv_inference_first_response_histogram_ms", ttftScale: 1000,
	}}
}

// tgiBuckets spells out TGI's duration layout: 0.0001 * 1.5^k, k = 1..35.
func tgiBuckets() []float64 {
	var b []float64
	for v, k := 0.0001, 1; k <= 35; k++ {
		v *= 1.5
		b = append(b, v)
	}
	return b
}

func labelMap(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func TestExpositionPerDialect(t *testing.T) {
	// vLLM's TTFTs are the reference for the other dialects' units: every
	// server runs the same engine on the same seed and clock.
	var vllmTTFTSum float64
	for _, tc := range dialectCases() {
		t.Run(string(tc.dialect), func(t *testing.T) {
			s, clock, hs := newTestServer(t, Options{Dialect: tc.dialect, Rate: 18, Seed: 5})
			clock.Step(45 * time.Second)
			fams, body, _ := scrape(t, hs.URL, "")
			st := s.Stats() // same instant: the scrape already advanced to it
			if st.Completed == 0 || st.Waiting == 0 {
				t.Fatalf("stats %+v: want a loaded server for the test to mean anything", st)
			}
			for _, f := range tc.families {
				if !strings.Contains(body, "\n"+f.name) {
					t.Errorf("exposition lacks the literal name %s", f.name)
				}
				checkFamily(t, fams, f, tc.labels, st)
			}
			if len(fams) != len(tc.families) {
				t.Errorf("exposition has families %v, want exactly %d", slices.Sorted(maps.Keys(fams)), len(tc.families))
			}
			if tc.ttft == "" {
				return
			}
			h := fams[tc.ttft].GetMetric()[0].GetHistogram()
			if h.GetSampleCount() < st.Completed || h.GetSampleCount() > st.Submitted {
				t.Errorf("%s counts %d first tokens, want between %d completed and %d submitted",
					tc.ttft, h.GetSampleCount(), st.Completed, st.Submitted)
			}
			switch sum := h.GetSampleSum() / tc.ttftScale; {
			case tc.dialect == VLLM:
				vllmTTFTSum = sum
			case vllmTTFTSum > 0 && math.Abs(sum-vllmTTFTSum) > 1e-6*vllmTTFTSum:
				t.Errorf("%s sums to %v in seconds, vLLM to %v: wrong unit", tc.ttft, sum, vllmTTFTSum)
			}
		})
	}
}

func checkFamily(t *testing.T, fams map[string]*dto.MetricFamily, f family, labels map[string]string, st Stats) {
	t.Helper()
	if f.labels != nil {
		labels = f.labels
	}
	mf, ok := fams[f.name]
	if !ok {
		t.Errorf("family %s missing", f.name)
		return
	}
	if mf.GetType() != f.typ {
		t.Errorf("%s has type %v, want %v", f.name, mf.GetType(), f.typ)
	}
	var matched int
	for _, m := range mf.GetMetric() {
		got := labelMap(m)
		// vLLM splits successes by finish reason; simulated requests stop.
		if reason, ok := got["finished_reason"]; ok {
			delete(got, "finished_reason")
			if reason != "stop" {
				if m.GetCounter().GetValue() != 0 {
					t.Errorf("%s{finished_reason=%q} = %v, want 0", f.name, reason, m.GetCounter().GetValue())
				}
				continue
			}
		}
		if !maps.Equal(got, labels) {
			t.Errorf("%s has labels %v, want %v", f.name, got, labels)
		}
		matched++
		switch f.typ {
		case dto.MetricType_GAUGE:
			checkValue(t, f, m.GetGauge().GetValue(), st)
		case dto.MetricType_COUNTER:
			checkValue(t, f, m.GetCounter().GetValue(), st)
		case dto.MetricType_HISTOGRAM:
			var bounds []float64
			for _, b := range m.GetHistogram().GetBucket() {
				if !math.IsInf(b.GetUpperBound(), 1) {
					bounds = append(bounds, b.GetUpperBound())
				}
			}
			if !slices.EqualFunc(bounds, f.buckets, func(a, b float64) bool { return math.Abs(a-b) <= 1e-12*b }) {
				t.Errorf("%s has buckets %v, want %v", f.name, bounds, f.buckets)
			}
			checkValue(t, f, float64(m.GetHistogram().GetSampleCount()), st)
		}
	}
	if matched != 1 {
		t.Errorf("%s has %d series with the server's labels, want 1", f.name, matched)
	}
}

func checkValue(t *testing.T, f family, got float64, st Stats) {
	t.Helper()
	if f.value == nil {
		return
	}
	if want := f.value(st); got != want {
		t.Errorf("%s = %v, engine says %v", f.name, got, want)
	}
}

func TestExpositionNegotiatesOpenMetrics(t *testing.T) {
	_, clock, hs := newTestServer(t, Options{Dialect: VLLM, Rate: 5, Seed: 1})
	clock.Step(10 * time.Second)
	fams, body, header := scrape(t, hs.URL, "application/openmetrics-text; version=1.0.0")
	if ct := header.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Errorf("Content-Type %q, want OpenMetrics", ct)
	}
	if !strings.HasSuffix(body, "# EOF\n") {
		t.Errorf("OpenMetrics body does not end with # EOF")
	}
	for _, name := range []string{"vllm:num_requests_waiting", "vllm:time_to_first_token_seconds"} {
		if _, ok := fams[name]; !ok || !strings.Contains(body, name) {
			t.Errorf("OpenMetrics exposition lacks %s", name)
		}
	}
	_, _, header = scrape(t, hs.URL, "text/plain;version=0.0.4")
	if ct := header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q, want the classic text format", ct)
	}
}

func TestSameSeedSameMetrics(t *testing.T) {
	var bodies []string
	for range 2 {
		_, clock, hs := newTestServer(t, Options{Dialect: SGLang, Rate: 14, Seed: 99})
		for range 6 {
			clock.Step(5 * time.Second)
			scrape(t, hs.URL, "")
		}
		_, body, _ := scrape(t, hs.URL, "")
		bodies = append(bodies, body)
	}
	if bodies[0] != bodies[1] {
		t.Errorf("two servers on the same seed and clock expose different metrics:\n%s\n---\n%s", bodies[0], bodies[1])
	}
}

func TestTTFTBucketOverride(t *testing.T) {
	_, _, hs := newTestServer(t, Options{Dialect: Triton, TTFTBuckets: []float64{50, 100, 250}})
	fams, _, _ := scrape(t, hs.URL, "")
	checkFamily(t, fams, family{name: "nv_inference_first_response_histogram_ms", typ: dto.MetricType_HISTOGRAM,
		buckets: []float64{50, 100, 250}}, map[string]string{"model": DefaultModel, "version": "1"}, Stats{})
	if _, err := NewServer(Options{TTFTBuckets: []float64{1, 1}}); err == nil {
		t.Errorf("NewServer accepted non-increasing buckets")
	}
}

// TestSnapshot: a snapshot is the text exposition of a server that served
// requests for the time asked.
func TestSnapshot(t *testing.T) {
	body, err := Snapshot(Options{Dialect: VLLM, Rate: 10, Seed: 1}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	e2e := fams["vllm:e2e_request_latency_seconds"].GetMetric()
	if len(e2e) != 1 || e2e[0].GetHistogram().GetSampleCount() < 100 {
		t.Fatalf("a minute at 10 requests/s should finish well over 100 requests: %v", e2e)
	}
}
