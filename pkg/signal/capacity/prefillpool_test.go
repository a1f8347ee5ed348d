package capacity

import (
	"math"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// twoPrefillReplicas is the estimate, through estimate (Estimate or
// EstimateWithin), of two replicas "a" and "b" that each take 40 prefills
// of 0.3-0.5 s in 15 s, as pod reports each replica given its prefill
// histogram's count: the second of two estimates 15 s apart, on a pool
// configured with PrefillPool set to pool.
func twoPrefillReplicas(t *testing.T, pool bool, pod func(uid string, n float64) Pod,
	estimate func(e *Estimator, k Key, now time.Time, pods []Pod) (Estimate, error)) Estimate {
	t.Helper()
	cfg := DefaultConfig()
	cfg.PrefillPool = pool
	e := New(cfg, nil)
	k := Key{Namespace: "ns", Target: "deployment/llm-prefill"}
	t0 := time.Unix(1000, 0)
	if _, err := estimate(e, k, t0, []Pod{pod("a", 100), pod("b", 100)}); err != nil {
		t.Fatal(err)
	}
	est, err := estimate(e, k, t0.Add(15*time.Second), []Pod{pod("a", 140), pod("b", 140)})
	if err != nil {
		t.Fatal(err)
	}
	return est
}

// TestPrefillPoolAndObjective: the prefill term at the objective a call
// gives (EstimateWithin, a prefill pool's share of the TTFT objective), and
// a prefill pool's term, which holds where a pool of whole requests gives
// up on an objective its prompts' prefill times alone rule out.
func TestPrefillPoolAndObjective(t *testing.T) {
	estimate := func(t *testing.T, pool bool, objective time.Duration) Estimate {
		t.Helper()
		pod := func(uid string, n float64) Pod {
			return Pod{Ready: true, Data: true, Running: 2, KVPercent: 10, UID: uid, Prefill: prefillHist(10, n)}
		}
		return twoPrefillReplicas(t, pool, pod, func(e *Estimator, k Key, now time.Time, pods []Pod) (Estimate, error) {
			return e.EstimateWithin(k, now, pods, objective)
		})
	}
	whole := estimate(t, false, time.Second)
	for _, tc := range []struct {
		name      string
		pool      bool
		objective time.Duration
		reachable bool
		// needed: compared with the whole pool's at the 1 s objective
		// (-1 fewer replicas, 0 the same, 1 more); none: no prefill
		// replicas needed at all.
		needed int
		none   bool
	}{
		{"whole requests, 1s", false, time.Second, true, 0, false},
		{"prefill pool, 1s: the same term", true, time.Second, true, 0, false},
		{"a tighter share of the objective needs more", true, 600 * time.Millisecond, true, 1, false},
		{"whole requests give up where prefill alone misses", false, 200 * time.Millisecond, false, 0, true},
		{"a prefill pool holds to its own prefill times", true, 200 * time.Millisecond, false, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			est := estimate(t, tc.pool, tc.objective)
			if est.Prefill.Reachable != tc.reachable {
				t.Errorf("Reachable = %v, want %v (%+v)", est.Prefill.Reachable, tc.reachable, est.Prefill)
			}
			if tc.none {
				if est.PrefillNeeded != 0 {
					t.Errorf("PrefillNeeded = %v, want 0", est.PrefillNeeded)
				}
				return
			}
			if est.PrefillNeeded <= 0 || est.Prefill.MaxBusy <= 0 {
				t.Fatalf("PrefillNeeded %v, MaxBusy %v: want a prefill term", est.PrefillNeeded, est.Prefill.MaxBusy)
			}
			switch d := est.PrefillNeeded - whole.PrefillNeeded; {
			case tc.needed == 0 && d != 0, tc.needed > 0 && d <= 0:
				t.Errorf("PrefillNeeded = %v, whole requests at 1s %v: want %+d", est.PrefillNeeded, whole.PrefillNeeded, tc.needed)
			}
		})
	}
}

// TestPrefillPoolFoundEmpty: a prefill replica holds a request only for its
// prefill, so a busy prefill pool is often found with nothing running or
// waiting at a scrape. Its window's prefill work is still its load: the
// pool asks for the replicas that work needs, where a pool of whole
// requests found empty, which holds each for its whole stream, is idle.
func TestPrefillPoolFoundEmpty(t *testing.T) {
	for _, tc := range []struct {
		name string
		pool bool
	}{
		{"prefill pool", true},
		{"whole requests", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Found empty at both scrapes.
			empty := func(uid string, n float64) Pod {
				return Pod{Ready: true, Data: true, UID: uid, Prefill: prefillHist(10, n)}
			}
			est := twoPrefillReplicas(t, tc.pool, empty, (*Estimator).Estimate)
			if est.Demand != 0 || est.Forecast != 0 || est.KVNeeded != 0 {
				t.Fatalf("demand %v, forecast %v, KV term %v: want an empty pool's zeros", est.Demand, est.Forecast, est.KVNeeded)
			}
			if !tc.pool {
				if est.Needed != 0 || est.Utilization != 0 {
					t.Errorf("Needed %v, Utilization %v: want an idle pool", est.Needed, est.Utilization)
				}
				return
			}
			if est.PrefillBusy <= 0 || est.PrefillNeeded <= 0 {
				t.Fatalf("prefill busy %v, term %v: want the window's prefill work", est.PrefillBusy, est.PrefillNeeded)
			}
			if est.Needed != est.PrefillNeeded || est.Utilization != est.Needed/2 {
				t.Errorf("Needed %v, Utilization %v: want the prefill term %v over 2 replicas", est.Needed, est.Utilization, est.PrefillNeeded)
			}
		})
	}
}

// TestPrefillPoolFoundEmptyHostile: the window's prefill work counts for a
// pool found empty, so a pod's spoofed prefill histogram reaches the
// estimate on that path too: a sum that is huge, infinite or not a number,
// or counts that run backwards, give an error or a finite estimate, never
// a non-finite one.
func TestPrefillPoolFoundEmptyHostile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoof func(h *histogram.Histogram)
	}{
		{"huge sum", func(h *histogram.Histogram) { h.Sum = 1e300 }},
		{"infinite sum", func(h *histogram.Histogram) { h.Sum = math.Inf(1) }},
		{"sum not a number", func(h *histogram.Histogram) { h.Sum = math.NaN() }},
		{"counts running backwards", func(h *histogram.Histogram) {
			for i := range h.Counts {
				h.Counts[i] /= 4
			}
			h.Count /= 4
		}},
		{"count not a number", func(h *histogram.Histogram) { h.Count = math.NaN() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.PrefillPool = true
			e := New(cfg, nil)
			k := Key{Namespace: "ns", Target: "deployment/llm-prefill"}
			t0 := time.Unix(1000, 0)
			empty := func(uid string, h *histogram.Histogram) Pod {
				return Pod{Ready: true, Data: true, UID: uid, Prefill: h}
			}
			if _, err := e.Estimate(k, t0, []Pod{empty("a", prefillHist(10, 100)), empty("b", prefillHist(10, 100))}); err != nil {
				t.Fatal(err)
			}
			spoofed := prefillHist(10, 140)
			tc.spoof(spoofed)
			est, err := e.Estimate(k, t0.Add(15*time.Second), []Pod{empty("a", spoofed), empty("b", prefillHist(10, 140))})
			if err != nil {
				return
			}
			for name, v := range map[string]float64{"Needed": est.Needed, "Utilization": est.Utilization, "PrefillNeeded": est.PrefillNeeded, "PrefillBusy": est.PrefillBusy} {
				if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
					t.Errorf("%s = %v, want a finite, non-negative number or an error", name, v)
				}
			}
		})
	}
}

// TestPrefillPoolHasNoKVTerm: a prefill replica holds a request's KV cache
// only for its prefill and transfer, so the pool has no KV term. Caught by
// a scrape in the middle of one long prompt each (a request running, 90%
// of the cache in use), a pool of whole requests reads a replica's cache
// as holding about one request and asks for KV room for its demand; a
// prefill pool asks for what its window's prefill work needs, as when it
// is found with short prompts.
func TestPrefillPoolHasNoKVTerm(t *testing.T) {
	estimate := func(t *testing.T, pool bool, running, kvPercent float64) Estimate {
		t.Helper()
		pod := func(uid string, n float64) Pod {
			return Pod{Ready: true, Data: true, Running: running, Waiting: 2, KVPercent: kvPercent, UID: uid, Prefill: prefillHist(10, n)}
		}
		return twoPrefillReplicas(t, pool, pod, (*Estimator).Estimate)
	}
	short := estimate(t, true, 2, 10)
	for _, tc := range []struct {
		name string
		pool bool
		// kv: whether the estimate should carry a KV term.
		kv bool
	}{
		{"prefill pool", true, false},
		{"whole requests", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			est := estimate(t, tc.pool, 1, 90)
			if est.Forecast <= 0 || est.Slots <= 0 {
				t.Fatalf("forecast %v, slots %v: want a loaded pool measured", est.Forecast, est.Slots)
			}
			if got := est.KVNeeded > 0; got != tc.kv {
				t.Fatalf("KV term %v (slots %v, per replica %v): want one: %v", est.KVNeeded, est.Slots, est.PerReplica, tc.kv)
			}
			if tc.kv {
				if est.Needed < est.KVNeeded || est.KVNeeded <= est.PrefillNeeded {
					t.Errorf("Needed %v, KV term %v, prefill term %v: want the KV term to lead", est.Needed, est.KVNeeded, est.PrefillNeeded)
				}
				return
			}
			if est.Needed != est.PrefillNeeded || math.Abs(est.Needed-short.Needed) > 1e-9 {
				t.Errorf("Needed %v, prefill term %v: want the prefill term, as with short prompts (%v)", est.Needed, est.PrefillNeeded, short.Needed)
			}
		})
	}
}
