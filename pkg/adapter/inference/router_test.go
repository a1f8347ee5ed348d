package inference

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuscale/gpuscale/pkg/signal"
)

func parseFile(t *testing.T, name string) familyMap {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fams, err := parseText(t, f)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return fams
}

func parseString(t *testing.T, s string) familyMap {
	t.Helper()
	fams, err := parseText(t, strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// The routers' own expositions: held requests summed per model over the
// label sets the router splits them by, a zero for a model it names with
// nothing held.
func TestDetectRouterSamples(t *testing.T) {
	for _, tc := range []struct {
		file    string
		dialect Dialect
		held    map[string]float64
	}{
		// EPP: target_model_name (after rewrite) names the model; the
		// request's own model_name when no rewrite applied.
		{"routers/epp.txt", EPP, map[string]float64{"food-review-1": 5, "meta-llama/Llama-3.1-8B-Instruct": 4, "idle-model": 0}},
		// An EPP that never held a request has no queue series at all.
		{"routers/epp_idle.txt", EPP, map[string]float64{}},
		{"routers/dynamo_frontend.txt", DynamoFrontend, map[string]float64{"Qwen/Qwen3-0.6B": 5, "deepseek-ai/DeepSeek-R1-Distill-Llama-8B": 0}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			fams := parseFile(t, tc.file)
			if !IsRouter(fams) {
				t.Fatal("IsRouter = false")
			}
			got, err := DetectRouter(fams)
			if err != nil {
				t.Fatal(err)
			}
			if got.Dialect != tc.dialect || !maps.Equal(got.Held, tc.held) || len(got.Rejected) != 0 {
				t.Fatalf("got %s %v rejected %v, want %s %v", got.Dialect, got.Held, got.Rejected, tc.dialect, tc.held)
			}
		})
	}
}

// An inference server is never read as a router, even one exposing a
// router's prefix too (a gateway built into a server), and a router is
// not an inference server.
func TestIsRouterLeavesInferenceServers(t *testing.T) {
	for _, name := range []string{"vllm.txt", "sglang.txt", "tgi.txt", "triton.txt"} {
		if IsRouter(parseFile(t, name)) {
			t.Errorf("%s read as a router", name)
		}
	}
	both := parseString(t, "vllm:num_requests_waiting{model_name=\"m\"} 1\ndynamo_frontend_queued_requests{model=\"m\"} 3\n")
	if IsRouter(both) {
		t.Error("a vLLM scrape with a Dynamo family read as a router")
	}
	if _, err := Detect(parseFile(t, "routers/epp.txt")); !errors.Is(err, ErrUnknownDialect) {
		t.Errorf("Detect(epp) = %v, want ErrUnknownDialect", err)
	}
	if _, err := DetectRouter(parseString(t, "foo 1\n")); !errors.Is(err, ErrUnknownRouter) {
		t.Errorf("DetectRouter(foo) = %v, want ErrUnknownRouter", err)
	}
}

// Hostile values: a model whose series is not a request count is left
// out, never served as a number, and the rejection says which series;
// the other models stand.
func TestDetectRouterRejects(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		held     map[string]float64
		rejected int
		wantErr  error
	}{
		{"NaN", `dynamo_frontend_queued_requests{model="a"} NaN
dynamo_frontend_queued_requests{model="b"} 2
`, map[string]float64{"b": 2}, 1, signal.ErrNotFinite},
		{"negative", `dynamo_frontend_queued_requests{model="a"} -1
`, map[string]float64{}, 1, signal.ErrOutOfRange},
		{"+Inf", `inference_extension_flow_control_queue_size{model_name="a",target_model_name="a",fairness_id="x"} +Inf
`, map[string]float64{}, 1, signal.ErrNotFinite},
		{"sum past the bound", fmt.Sprintf(`inference_extension_flow_control_queue_size{model_name="a",fairness_id="x"} %d
inference_extension_flow_control_queue_size{model_name="a",fairness_id="y"} %d
`, signal.MaxRequests, signal.MaxRequests), map[string]float64{}, 1, signal.ErrOutOfRange},
		{"one bad series voids its model", `inference_extension_flow_control_queue_size{model_name="a",fairness_id="x"} 3
inference_extension_flow_control_queue_size{model_name="a",fairness_id="y"} NaN
`, map[string]float64{}, 1, signal.ErrNotFinite},
		{"a histogram where the gauge belongs", `# TYPE dynamo_frontend_queued_requests histogram
dynamo_frontend_queued_requests_bucket{model="a",le="+Inf"} 1
dynamo_frontend_queued_requests_sum{model="a"} 1
dynamo_frontend_queued_requests_count{model="a"} 1
`, map[string]float64{}, 1, ErrNotGauge},
		{"no model label", `dynamo_frontend_queued_requests 4
`, map[string]float64{}, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DetectRouter(parseString(t, tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got.Held, tc.held) || len(got.Rejected) != tc.rejected {
				t.Fatalf("held %v rejected %v, want %v and %d rejections", got.Held, got.Rejected, tc.held, tc.rejected)
			}
			if tc.wantErr != nil && !errors.Is(got.Rejected[0], tc.wantErr) {
				t.Fatalf("rejection %v, want %v", got.Rejected[0], tc.wantErr)
			}
		})
	}
}

func TestDetectRouterBoundsModels(t *testing.T) {
	var b strings.Builder
	for i := range MaxRouterModels + 1 {
		fmt.Fprintf(&b, "dynamo_frontend_queued_requests{model=\"m%d\"} 1\n", i)
	}
	if _, err := DetectRouter(parseString(t, b.String())); !errors.Is(err, ErrTooManyModels) {
		t.Fatalf("err = %v, want ErrTooManyModels", err)
	}
}

// Every family DetectRouter reads is among RouterFamilies, or a scraper
// that parses only those would never hand it over.
func TestRouterFamiliesNameWhatDetectRouterReads(t *testing.T) {
	names, prefixes := RouterFamilies()
	for _, m := range routerMappings {
		if !strings.Contains(strings.Join(names, " "), m.held) {
			t.Errorf("%s: %s not in RouterFamilies", m.dialect, m.held)
		}
		for _, p := range m.prefixes {
			if !strings.Contains(strings.Join(prefixes, " "), p) {
				t.Errorf("%s: prefix %s not in RouterFamilies", m.dialect, p)
			}
		}
	}
}
