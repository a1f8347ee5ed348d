package capacity

import (
	"math"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// ttftHist is a cumulative TTFT histogram of n requests, all within the
// bucket (lo, hi] of ttftBounds whose upper bound is hi: its median is the
// bucket's middle.
func ttftHist(hi, n float64) *histogram.Histogram {
	bounds := []float64{0.1, 0.2, 0.4, 0.8, 1.6, math.Inf(1)}
	h := &histogram.Histogram{Bounds: bounds, Counts: make([]float64, len(bounds))}
	lo := 0.0
	for i, b := range bounds {
		if b == hi {
			h.Count, h.Sum = n, n*(lo+hi)/2
		}
		h.Counts[i] = h.Count
		lo = b
	}
	return h
}

// TestPrefillPoolShare: a prefill pool's prefill term is held to what its
// decode pool's median time to first token over the window leaves of the
// objective, at least half of it, and to the whole objective when nothing
// of the decode pool's is measured; the term is then exactly
// EstimateWithin's at that share.
func TestPrefillPoolShare(t *testing.T) {
	t0 := time.Unix(1000, 0)
	prefill := func(uid string, n float64) Pod {
		return Pod{Ready: true, Data: true, Running: 2, KVPercent: 10, UID: uid, Prefill: prefillHist(10, n)}
	}
	tests := []struct {
		name string
		// decode pods at the first and the second estimate, 15 s later
		before, after []Pod
		want          time.Duration
	}{
		{name: "no decode pool: the whole objective", want: time.Second},
		{
			name:   "decode median 0.3s leaves 0.7s",
			before: []Pod{{Ready: true, UID: "d1", TTFT: ttftHist(0.4, 100)}, {Ready: true, UID: "d2", TTFT: ttftHist(0.4, 50)}},
			after:  []Pod{{Ready: true, UID: "d1", TTFT: ttftHist(0.4, 160)}, {Ready: true, UID: "d2", TTFT: ttftHist(0.4, 90)}},
			want:   700 * time.Millisecond,
		},
		{
			name:   "decode median 0.6s: held to half",
			before: []Pod{{Ready: true, UID: "d1", TTFT: ttftHist(0.8, 100)}},
			after:  []Pod{{Ready: true, UID: "d1", TTFT: ttftHist(0.8, 130)}},
			want:   500 * time.Millisecond,
		},
		{
			name:   "decode pool past the objective: half",
			before: []Pod{{Ready: true, UID: "d1", TTFT: ttftHist(1.6, 100)}},
			after:  []Pod{{Ready: true, UID: "d1", TTFT: ttftHist(1.6, 130)}},
			want:   500 * time.Millisecond,
		},
		{
			name:  "a decode pod seen once has no increase yet",
			after: []Pod{{Ready: true, UID: "d1", TTFT: ttftHist(0.4, 100)}},
			want:  time.Second,
		},
		{
			name:   "a restarted decode pod's counts start over: they are the increase",
			before: []Pod{{Ready: true, UID: "d1", TTFT: ttftHist(0.8, 100)}},
			after:  []Pod{{Ready: true, UID: "d1", TTFT: ttftHist(0.4, 10)}},
			want:   700 * time.Millisecond,
		},
		{
			name:   "no request in the window",
			before: []Pod{{Ready: true, UID: "d1", TTFT: ttftHist(0.4, 100)}},
			after:  []Pod{{Ready: true, UID: "d1", TTFT: ttftHist(0.4, 100)}},
			want:   time.Second,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Objective = time.Second
			cfg.PrefillPool = true
			e := New(cfg, nil)
			k := Key{Namespace: "ns", Target: "deployment/llm-prefill"}
			if _, err := e.EstimatePrefillPool(k, t0, []Pod{prefill("a", 100), prefill("b", 100)}, tc.before); err != nil {
				t.Fatal(err)
			}
			est, err := e.EstimatePrefillPool(k, t0.Add(15*time.Second), []Pod{prefill("a", 140), prefill("b", 140)}, tc.after)
			if err != nil {
				t.Fatal(err)
			}
			if got := time.Duration(math.Round(est.PrefillObjective*1e3)) * time.Millisecond; got != tc.want {
				t.Errorf("PrefillObjective = %v, want %v", got, tc.want)
			}

			// The same pods through EstimateWithin at the share: the
			// same prefill term.
			ref := New(cfg, nil)
			if _, err := ref.EstimateWithin(k, t0, []Pod{prefill("a", 100), prefill("b", 100)}, tc.want); err != nil {
				t.Fatal(err)
			}
			want, err := ref.EstimateWithin(k, t0.Add(15*time.Second), []Pod{prefill("a", 140), prefill("b", 140)}, tc.want)
			if err != nil {
				t.Fatal(err)
			}
			if est.PrefillNeeded != want.PrefillNeeded || est.Prefill != want.Prefill {
				t.Errorf("prefill term %v (%+v), want EstimateWithin's at %v: %v (%+v)", est.PrefillNeeded, est.Prefill, tc.want, want.PrefillNeeded, want.Prefill)
			}
		})
	}
	// The share moves the term: a tighter share needs more prefill.
	cfg := DefaultConfig()
	cfg.Objective, cfg.PrefillPool = time.Second, true
	needed := func(decodeHi float64) float64 {
		e := New(cfg, nil)
		k := Key{Namespace: "ns", Target: "deployment/p"}
		if _, err := e.EstimatePrefillPool(k, t0, []Pod{prefill("a", 100)}, []Pod{{Ready: true, UID: "d", TTFT: ttftHist(decodeHi, 100)}}); err != nil {
			t.Fatal(err)
		}
		est, err := e.EstimatePrefillPool(k, t0.Add(15*time.Second), []Pod{prefill("a", 140)}, []Pod{{Ready: true, UID: "d", TTFT: ttftHist(decodeHi, 200)}})
		if err != nil {
			t.Fatal(err)
		}
		return est.PrefillNeeded
	}
	if fast, slow := needed(0.2), needed(0.8); !(slow > fast) {
		t.Errorf("PrefillNeeded with a 0.6s decode median %v, with 0.15s %v: want more for the tighter share", slow, fast)
	}
}
