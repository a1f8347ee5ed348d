package inference

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// vllmPrefill is a vLLM scrape with the request prefill-time histogram of
// two engines, as vLLM V1 exports it (vllm/v1/metrics/loggers.py).
const vllmPrefill = `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1
vllm:num_requests_waiting{engine="1",model_name="m"} 0
# TYPE vllm:request_prefill_time_seconds histogram
vllm:request_prefill_time_seconds_bucket{engine="0",model_name="m",le="0.3"} 10
vllm:request_prefill_time_seconds_bucket{engine="0",model_name="m",le="0.5"} 14
vllm:request_prefill_time_seconds_bucket{engine="0",model_name="m",le="1.0"} 19
vllm:request_prefill_time_seconds_bucket{engine="0",model_name="m",le="+Inf"} 20
vllm:request_prefill_time_seconds_sum{engine="0",model_name="m"} 7.5
vllm:request_prefill_time_seconds_count{engine="0",model_name="m"} 20
vllm:request_prefill_time_seconds_bucket{engine="1",model_name="m",le="0.3"} 1
vllm:request_prefill_time_seconds_bucket{engine="1",model_name="m",le="0.5"} 2
vllm:request_prefill_time_seconds_bucket{engine="1",model_name="m",le="1.0"} 3
vllm:request_prefill_time_seconds_bucket{engine="1",model_name="m",le="+Inf"} 4
vllm:request_prefill_time_seconds_sum{engine="1",model_name="m"} 3.5
vllm:request_prefill_time_seconds_count{engine="1",model_name="m"} 4
`

func TestDetectPrefillHistogram(t *testing.T) {
	tests := []struct {
		name       string
		scrape     string
		wantCounts []float64 // nil: no prefill histogram
		wantSum    float64
		rejected   string
	}{
		{name: "two engines merged", scrape: vllmPrefill, wantCounts: []float64{11, 16, 22, 24}, wantSum: 11},
		{name: "absent", scrape: "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 3\n"},
		{
			// A count that falls from one bucket to the next is a broken
			// or hostile server: the histogram is refused, never read.
			name:     "decreasing buckets",
			scrape:   strings.Replace(vllmPrefill, `le="1.0"} 3`, `le="1.0"} 0`, 1),
			rejected: "vllm:request_prefill_time_seconds",
		},
		{
			name:     "not-a-number sum",
			scrape:   strings.Replace(vllmPrefill, `_sum{engine="1",model_name="m"} 3.5`, `_sum{engine="1",model_name="m"} NaN`, 1),
			rejected: "vllm:request_prefill_time_seconds",
		},
		{
			// Past 2^53 a float64 no longer counts single requests.
			name: "count beyond exact floats",
			scrape: strings.NewReplacer(`le="+Inf"} 4`, `le="+Inf"} 1e300`,
				`_count{engine="1",model_name="m"} 4`, `_count{engine="1",model_name="m"} 1e300`).Replace(vllmPrefill),
			rejected: "vllm:request_prefill_time_seconds",
		},
		{
			name:     "negative duration",
			scrape:   strings.Replace(vllmPrefill, `_sum{engine="0",model_name="m"} 7.5`, `_sum{engine="0",model_name="m"} -7.5`, 1),
			rejected: "vllm:request_prefill_time_seconds",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Detect(text(t, tt.scrape))
			if err != nil {
				t.Fatal(err)
			}
			if tt.rejected != "" {
				if got.Prefill != nil {
					t.Fatalf("Prefill = %+v, want none", got.Prefill)
				}
				if len(got.Rejected) != 1 || !strings.Contains(got.Rejected[0].Series, tt.rejected) || !errors.Is(got.Rejected[0].Err, histogram.ErrInvalid) {
					t.Fatalf("Rejected = %v, want one invalid %s", got.Rejected, tt.rejected)
				}
				return
			}
			if tt.wantCounts == nil {
				if got.Prefill != nil {
					t.Fatalf("Prefill = %+v, want none", got.Prefill)
				}
				return
			}
			if got.Prefill == nil {
				t.Fatal("no Prefill histogram")
			}
			if !equalFloats(got.Prefill.Counts, tt.wantCounts) || got.Prefill.Sum != tt.wantSum || got.Prefill.Count != 24 {
				t.Fatalf("Prefill = counts %v sum %v count %v, want %v %v 24", got.Prefill.Counts, got.Prefill.Sum, got.Prefill.Count, tt.wantCounts, tt.wantSum)
			}
			if got.QueueDepth == nil || *got.QueueDepth != 1 {
				t.Fatalf("QueueDepth = %v, want 1", got.QueueDepth)
			}
		})
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
