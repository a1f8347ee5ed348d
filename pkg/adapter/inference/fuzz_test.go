package inference

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuscale/gpuscale/pkg/signal"
)

// FuzzDetect feeds arbitrary text through the text parser and Detect: never
// a panic, only ErrUnknownDialect as error, and every signal in range. The
// OpenMetrics decoder stays out: it matches each line against the ABNF
// grammar at ~10ms a line, which starves the fuzzer, and Detect sees the
// same dto families from either.
func FuzzDetect(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(ttftTwoEngines))
	f.Add([]byte("vllm:num_requests_waiting NaN\nvllm:kv_cache_usage_perc -0.5\n"))
	f.Add([]byte("# TYPE nv_inference_first_response_histogram_ms histogram\nnv_inference_first_response_histogram_ms_bucket{model=\"m\",le=\"NaN\"} 1\n"))
	routers, err := filepath.Glob(filepath.Join("testdata", "routers", "*.txt"))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range routers {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("inference_extension_flow_control_queue_size{model_name=\"a\",fairness_id=\"x\"} 1e300\ninference_extension_flow_control_queue_size{model_name=\"a\",fairness_id=\"y\"} -0\n"))
	f.Add([]byte("dynamo_frontend_queued_requests{model=\"\"} 3\ndynamo_frontend_queued_requests{model=\"m\"} Inf\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		if fams, err := parseText(t, bytes.NewReader(in)); err == nil {
			checkDetect(t, fams)
			checkDetectRouter(t, fams)
		}
	})
}

// checkDetectRouter: only its own errors, every held count a request
// count, no model named empty, and a scrape is never both a router and an
// inference server.
func checkDetectRouter(t *testing.T, fams familyMap) {
	t.Helper()
	s, err := DetectRouter(fams)
	if err != nil {
		if !errors.Is(err, ErrUnknownRouter) && !errors.Is(err, ErrTooManyModels) {
			t.Fatalf("DetectRouter: unexpected error %v", err)
		}
		return
	}
	for model, v := range s.Held {
		if model == "" {
			t.Fatal("a held count for no model")
		}
		if err := signal.QueueDepth.Check(v); err != nil {
			t.Fatalf("model %q held %v: %v", model, v, err)
		}
	}
	if _, err := Detect(fams); IsRouter(fams) && err == nil {
		t.Fatal("a scrape read as both a router and an inference server")
	}
}

func checkDetect(t *testing.T, fams familyMap) {
	t.Helper()
	s, err := Detect(fams)
	if err != nil {
		if !errors.Is(err, ErrUnknownDialect) {
			t.Fatalf("Detect: unexpected error %v", err)
		}
		return
	}
	checkSignals(t, s)
	byModel, err := DetectByModel(fams)
	if err != nil {
		t.Fatalf("DetectByModel failed where Detect did not: %v", err)
	}
	for _, s := range byModel {
		checkSignals(t, s)
	}
}

func checkSignals(t *testing.T, s *Signals) {
	t.Helper()
	for sig, p := range map[signal.Signal]*float64{signal.QueueDepth: s.QueueDepth, signal.RequestsRunning: s.Running, signal.KVCacheUtilization: s.KVCacheUtilization} {
		if p != nil {
			if err := sig.Check(*p); err != nil {
				t.Fatalf("%s served: %v", sig, err)
			}
		}
	}
	if s.TTFT != nil {
		if err := signal.CheckTTFT(s.TTFT); err != nil {
			t.Fatalf("TTFT: %v", err)
		}
	}
}
