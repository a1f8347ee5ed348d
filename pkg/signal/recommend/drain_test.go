package recommend

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// streams is a request-duration histogram on vLLM's e2e bucket layout
// holding, below each bound, the cumulative count given (bounds absent
// from counts hold what the bound below them holds).
func streams(t *testing.T, counts map[float64]float64) *histogram.Histogram {
	t.Helper()
	bounds := []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680, math.Inf(1)}
	h := &histogram.Histogram{Bounds: bounds, Counts: make([]float64, len(bounds))}
	for i, b := range bounds {
		if i > 0 {
			h.Counts[i] = h.Counts[i-1]
		}
		if c, ok := counts[b]; ok {
			h.Counts[i] = c
		}
	}
	h.Count = h.Counts[len(h.Counts)-1]
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestRecommendDrain(t *testing.T) {
	tests := []struct {
		name                string
		h                   *histogram.Histogram
		maxGraceful         time.Duration
		wantPreStop, wantGr time.Duration
		wantWarnings        []string
	}{
		{"nothing measured", nil, 600 * time.Second, 0, 0, []string{"not measured"}},
		{"no request yet", &histogram.Histogram{Bounds: []float64{1, math.Inf(1)}, Counts: []float64{0, 0}}, 600 * time.Second, 0, 0, []string{"not measured"}},
		{"short streams", streams(t, map[float64]float64{0.5: 3, 2: 40}), 600 * time.Second, 7 * time.Second, 17 * time.Second, nil},
		{"the longest stream sets it, not the median", streams(t, map[float64]float64{1: 900, 2: 999, 60: 1000}), 600 * time.Second, 65 * time.Second, 75 * time.Second, nil},
		{"streams past the last bucket", streams(t, map[float64]float64{7680: 10, math.Inf(1): 11}), 0, 7685 * time.Second, 7695 * time.Second, []string{"outlasted"}},
		{"over the autoscaler's drain limit", streams(t, map[float64]float64{960: 5}), 600 * time.Second, 965 * time.Second, 975 * time.Second, []string{"--max-graceful-termination-sec 600"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ca := DefaultAutoscaler()
			ca.MaxGracefulTermination = tt.maxGraceful
			d := RecommendDrain(tt.h, ca)
			if d.PreStop != tt.wantPreStop || d.Grace != tt.wantGr {
				t.Errorf("preStop %v, grace %v; want %v, %v", d.PreStop, d.Grace, tt.wantPreStop, tt.wantGr)
			}
			if d.PreStop > 0 && (d.PreStop < d.Longest || d.Grace <= d.PreStop) {
				t.Errorf("preStop %v does not cover the longest stream %v, or grace %v does not cover it", d.PreStop, d.Longest, d.Grace)
			}
			if len(d.Warnings) != len(tt.wantWarnings) {
				t.Fatalf("warnings %q, want %d", d.Warnings, len(tt.wantWarnings))
			}
			for i, w := range tt.wantWarnings {
				if !strings.Contains(d.Warnings[i], w) {
					t.Errorf("warning %q lacks %q", d.Warnings[i], w)
				}
			}
		})
	}
}

// TestStreams: the request-duration histograms of vLLM (one per engine),
// SGLang and TGI are read and summed; other histograms are not.
func TestStreams(t *testing.T) {
	tests := []struct {
		name        string
		exposition  string
		wantCount   float64
		wantLongest time.Duration
	}{
		{"vLLM, two engines", `# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0"} 2
vllm:e2e_request_latency_seconds_bucket{engine="0",le="5.0"} 5
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf"} 5
vllm:e2e_request_latency_seconds_sum{engine="0"} 9
vllm:e2e_request_latency_seconds_count{engine="0"} 5
vllm:e2e_request_latency_seconds_bucket{engine="1",le="1.0"} 0
vllm:e2e_request_latency_seconds_bucket{engine="1",le="5.0"} 0
vllm:e2e_request_latency_seconds_bucket{engine="1",le="+Inf"} 0
vllm:e2e_request_latency_seconds_sum{engine="1"} 0
vllm:e2e_request_latency_seconds_count{engine="1"} 0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="100"} 1
vllm:time_to_first_token_seconds_bucket{le="+Inf"} 1
vllm:time_to_first_token_seconds_sum 50
vllm:time_to_first_token_seconds_count 1
`, 5, 5 * time.Second},
		{"SGLang", `# TYPE sglang:e2e_request_latency_seconds histogram
sglang:e2e_request_latency_seconds_bucket{le="10"} 1
sglang:e2e_request_latency_seconds_bucket{le="30"} 4
sglang:e2e_request_latency_seconds_bucket{le="+Inf"} 4
sglang:e2e_request_latency_seconds_sum 60
sglang:e2e_request_latency_seconds_count 4
`, 4, 30 * time.Second},
		{"TGI", `# TYPE tgi_request_duration histogram
tgi_request_duration_bucket{le="0.5"} 7
tgi_request_duration_bucket{le="+Inf"} 7
tgi_request_duration_sum 2
tgi_request_duration_count 7
`, 7, 500 * time.Millisecond},
		{"no request-duration histogram", `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running 3
`, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := Streams([]byte(tt.exposition))
			if err != nil {
				t.Fatal(err)
			}
			longest, n, over := LongestStream(h)
			if n != tt.wantCount || longest != tt.wantLongest || over {
				t.Errorf("%v streams, longest %v (over %v); want %v, %v", n, longest, over, tt.wantCount, tt.wantLongest)
			}
		})
	}
	if _, err := Streams([]byte("not an exposition {")); err == nil {
		t.Error("a broken exposition parsed")
	}
	if !slices.Contains(StreamFamilies, "vllm:e2e_request_latency_seconds") {
		t.Error("vLLM's family is not read")
	}
}
