package inference

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuscale/gpuscale/pkg/store"
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
	f.Fuzz(func(t *testing.T, in []byte) {
		if fams, err := parseText(t, bytes.NewReader(in)); err == nil {
			checkDetect(t, fams)
		}
	})
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
	for sig, p := range map[store.Signal]*float64{store.QueueDepth: s.QueueDepth, store.RequestsRunning: s.Running, store.KVCacheUtilization: s.KVCacheUtilization} {
		if p != nil {
			if err := sig.Check(*p); err != nil {
				t.Fatalf("%s served: %v", sig, err)
			}
		}
	}
	if s.TTFT != nil {
		if err := store.CheckTTFT(s.TTFT); err != nil {
			t.Fatalf("TTFT: %v", err)
		}
	}
}
