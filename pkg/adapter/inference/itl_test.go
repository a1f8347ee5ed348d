package inference

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// itlSeries renders one inter-token latency histogram family, TYPE line
// included, with the labels given (without braces): counts 10/14/19/20,
// sum 2.5.
func itlSeries(family, labels string) string {
	return "# TYPE " + family + " histogram\n" + itlBody(family, labels)
}

// itlBody is itlSeries without the TYPE line, to add a series to a family.
func itlBody(family, labels string) string {
	l := func(extra string) string {
		switch {
		case labels == "" && extra == "":
			return ""
		case labels == "":
			return "{" + extra + "}"
		case extra == "":
			return "{" + labels + "}"
		}
		return "{" + labels + "," + extra + "}"
	}
	return family + "_bucket" + l(`le="0.025"`) + " 10\n" +
		family + "_bucket" + l(`le="0.05"`) + " 14\n" +
		family + "_bucket" + l(`le="0.1"`) + " 19\n" +
		family + "_bucket" + l(`le="+Inf"`) + " 20\n" +
		family + "_sum" + l("") + " 2.5\n" +
		family + "_count" + l("") + " 20\n"
}

func TestDetectITL(t *testing.T) {
	vllmGauge := "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 1\n"
	tests := []struct {
		name   string
		scrape string
		// wantSum: 0 means no ITL histogram.
		wantSum  float64
		rejected string
	}{
		{name: "vLLM inter-token latency", scrape: vllmGauge + itlSeries("vllm:inter_token_latency_seconds", `model_name="m"`), wantSum: 2.5},
		{name: "vLLM before 0.11: time per output token", scrape: vllmGauge + itlSeries("vllm:time_per_output_token_seconds", `model_name="m"`), wantSum: 2.5},
		{
			// vLLM 0.11 exports the same observations under both names:
			// read once, not added up.
			name: "vLLM 0.11: both names, the new one read",
			scrape: vllmGauge + itlSeries("vllm:inter_token_latency_seconds", `model_name="m"`) +
				strings.ReplaceAll(itlSeries("vllm:time_per_output_token_seconds", `model_name="m"`), " 2.5\n", " 99\n"),
			wantSum: 2.5,
		},
		{name: "SGLang", scrape: "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=\"m\"} 0\n" + itlSeries("sglang:inter_token_latency_seconds", `model_name="m"`), wantSum: 2.5},
		{name: "SGLang, older name", scrape: "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=\"m\"} 0\n" + itlSeries("sglang:time_per_output_token_seconds", `model_name="m"`), wantSum: 2.5},
		{name: "TGI mean time per token", scrape: "# TYPE tgi_queue_size gauge\ntgi_queue_size 0\n" + itlSeries("tgi_request_mean_time_per_token_duration", ""), wantSum: 2.5},
		{name: "Triton has none", scrape: "# TYPE nv_inference_pending_request_count gauge\nnv_inference_pending_request_count{model=\"m\",version=\"1\"} 0\n"},
		{
			name:     "decreasing buckets refused",
			scrape:   vllmGauge + strings.Replace(itlSeries("vllm:inter_token_latency_seconds", `model_name="m"`), `le="0.1"} 19`, `le="0.1"} 3`, 1),
			rejected: "vllm:inter_token_latency_seconds",
		},
		{
			name:     "negative sum refused",
			scrape:   vllmGauge + strings.Replace(itlSeries("vllm:inter_token_latency_seconds", `model_name="m"`), " 2.5\n", " -2.5\n", 1),
			rejected: "vllm:inter_token_latency_seconds",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Detect(text(t, tt.scrape))
			if err != nil {
				t.Fatal(err)
			}
			if tt.rejected != "" {
				if got.ITL != nil {
					t.Fatalf("ITL = %+v, want none", got.ITL)
				}
				if len(got.Rejected) != 1 || !strings.Contains(got.Rejected[0].Series, tt.rejected) || !errors.Is(got.Rejected[0].Err, histogram.ErrInvalid) {
					t.Fatalf("Rejected = %v, want one invalid %s", got.Rejected, tt.rejected)
				}
				return
			}
			if tt.wantSum == 0 {
				if got.ITL != nil {
					t.Fatalf("ITL = %+v, want none", got.ITL)
				}
				return
			}
			if got.ITL == nil {
				t.Fatal("no ITL histogram")
			}
			if !equalFloats(got.ITL.Counts, []float64{10, 14, 19, 20}) || got.ITL.Sum != tt.wantSum || got.ITL.Count != 20 {
				t.Fatalf("ITL = counts %v sum %v count %v, want [10 14 19 20] %v 20", got.ITL.Counts, got.ITL.Sum, got.ITL.Count, tt.wantSum)
			}
		})
	}
}

// TestITLByModel: the ITL histograms of two models are kept apart, and two
// engines of one model merged.
func TestITLByModel(t *testing.T) {
	const family = "vllm:inter_token_latency_seconds"
	scrape := "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"a\"} 1\n" +
		itlSeries(family, `engine="0",model_name="a"`) + itlBody(family, `engine="1",model_name="a"`) +
		itlBody(family, `engine="0",model_name="b"`)
	by, err := DetectByModel(text(t, scrape))
	if err != nil {
		t.Fatal(err)
	}
	if a := by["a"]; a == nil || a.ITL == nil || a.ITL.Count != 40 || a.ITL.Sum != 5 {
		t.Fatalf("model a: %+v, want two engines merged (count 40, sum 5)", a)
	}
	if b := by["b"]; b == nil || b.ITL == nil || b.ITL.Count != 20 {
		t.Fatalf("model b: %+v, want its own histogram", b)
	}
}
