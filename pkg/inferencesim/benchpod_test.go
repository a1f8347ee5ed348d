package inferencesim

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestBenchPodExposition: a bench pod's exposition parses, carries its
// own four families once each with the values its index gives, and keeps
// the rest of a loaded vLLM's families.
func TestBenchPodExposition(t *testing.T) {
	rest, err := BenchPodRest()
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	BenchPodHandler(13, time.Now().Add(-10*time.Second), rest).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("the exposition does not parse: %v", err)
	}
	for name, want := range map[string]float64{"vllm:num_requests_waiting": 4, "vllm:num_requests_running": 11, "vllm:kv_cache_usage_perc": 0.13} {
		f := fams[name]
		if f == nil || len(f.Metric) != 1 || f.Metric[0].GetGauge().GetValue() != want {
			t.Errorf("%s = %v, want one sample of %v", name, f, want)
		}
	}
	h := fams["vllm:time_to_first_token_seconds"].GetMetric()
	if want := uint64((BenchPodUptime + 10*time.Second).Seconds() * 2); len(h) != 1 || h[0].GetHistogram().GetSampleCount() < want-1 || h[0].GetHistogram().GetSampleCount() > want+20 || len(h[0].GetHistogram().GetBucket()) != len(benchPodBounds) {
		t.Errorf("TTFT histogram %v, want one with about %d requests over vLLM's buckets", h, want)
	}
	if len(fams) <= 4 {
		t.Errorf("%d families, want the rest of a loaded vLLM's beside the pod's four", len(fams))
	}
}
