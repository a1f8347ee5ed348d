package capacity

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// vllmBounds are vLLM's request-latency buckets, its prefill histogram's.
var vllmBounds = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, math.Inf(1)}

// prefillHist is a cumulative histogram over vllmBounds from per-bucket
// counts, with its sum at the buckets' middles.
func prefillHist(per ...float64) *histogram.Histogram {
	h := &histogram.Histogram{Bounds: vllmBounds, Counts: make([]float64, len(vllmBounds))}
	lo := 0.0
	for i, b := range vllmBounds {
		n := 0.0
		if i < len(per) {
			n = per[i]
		}
		h.Count += n
		h.Counts[i] = h.Count
		if !math.IsInf(b, 1) {
			h.Sum += n * (lo + b) / 2
		}
		lo = b
	}
	return h
}

func TestMaxPrefillBusy(t *testing.T) {
	tests := []struct {
		name          string
		h             *histogram.Histogram
		objective     float64
		wantReachable bool
		wantOver      float64
		check         func(t *testing.T, l PrefillLimit)
	}{
		{name: "no histogram", h: nil, objective: 1},
		{name: "fewer requests than the tail needs", h: prefillHist(9), objective: 1},
		{
			// 15 of 100 prefills alone exceed 1 s: the p90 is out of
			// reach whatever the replicas.
			name: "unreachable", h: prefillHist(50, 20, 10, 5, 15), objective: 1, wantOver: 0.15,
		},
		{
			// Every prefill at 0.15 s: the M/G/1 budget equation
			// rho*exp(-(T-s)(1-rho)/(s/2)) = 0.1 has its root here.
			name: "one size", h: prefillHist(100), objective: 1, wantReachable: true,
			check: func(t *testing.T, l PrefillLimit) {
				s, se := 0.15, 0.075
				got := l.MaxBusy * math.Exp(-(1-s)*(1-l.MaxBusy)/se)
				near(t, "share missed at MaxBusy", got, 0.1, 1e-6)
				if l.MaxBusy < 0.8 {
					t.Errorf("MaxBusy = %v: prefills of 0.15 s against 1 s should let prefill run busy", l.MaxBusy)
				}
			},
		},
		{
			// The share over 1 s is interpolated in the (0.8, 1.0]
			// bucket: half of its 4 requests, plus the 4 above.
			name: "interpolated over the objective", h: prefillHist(60, 20, 12, 4, 4), objective: 0.9, wantReachable: true, wantOver: 0.06,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := MaxPrefillBusy(tt.h, tt.objective, 0.9, 1)
			if l.Reachable != tt.wantReachable {
				t.Fatalf("Reachable = %v, want %v (%+v)", l.Reachable, tt.wantReachable, l)
			}
			near(t, "OverObjective", l.OverObjective, tt.wantOver, 1e-9)
			if !l.Reachable && l.MaxBusy != 0 {
				t.Errorf("MaxBusy = %v without a reachable objective", l.MaxBusy)
			}
			if l.Reachable && !(l.MaxBusy > 0 && l.MaxBusy < 1) {
				t.Errorf("MaxBusy = %v, want in (0, 1)", l.MaxBusy)
			}
			if tt.check != nil {
				tt.check(t, l)
			}
		})
	}
}

// TestMaxPrefillBusyOrders: a looser objective lets prefill run busier,
// and longer prompts make it run emptier.
func TestMaxPrefillBusyOrders(t *testing.T) {
	short := prefillHist(80, 15, 5)
	long := prefillHist(30, 40, 25, 3)
	var prev float64
	for _, obj := range []float64{0.8, 1, 1.5, 2.5} {
		l := MaxPrefillBusy(short, obj, 0.9, 1)
		if !l.Reachable || l.MaxBusy <= prev {
			t.Errorf("objective %v: MaxBusy %v not above %v", obj, l.MaxBusy, prev)
		}
		prev = l.MaxBusy
	}
	if s, l := MaxPrefillBusy(short, 1, 0.9, 1), MaxPrefillBusy(long, 1, 0.9, 1); !(l.MaxBusy < s.MaxBusy) {
		t.Errorf("long prompts MaxBusy %v, short %v: long should run emptier", l.MaxBusy, s.MaxBusy)
	}
}

// TestMaxPrefillBusyDispersion: the more regular a replica's arrivals (the
// measured index of dispersion, 1 for a random router), the busier its
// prefill may run (Kingman); equal prefills arriving evenly never queue.
func TestMaxPrefillBusyDispersion(t *testing.T) {
	h := prefillHist(30, 50, 15, 3)
	prev := 1.0
	for _, d := range []float64{0, 0.1, 0.5, 1, 2, 4} {
		l := MaxPrefillBusy(h, 1, 0.9, d)
		if !l.Reachable || !(l.MaxBusy < prev) {
			t.Errorf("dispersion %v: MaxBusy %v, want reachable and below %v", d, l.MaxBusy, prev)
		}
		prev = l.MaxBusy
	}
	if l := MaxPrefillBusy(prefillHist(0, 40), 1, 0.9, 0); l.MaxBusy != 1 {
		t.Errorf("equal prefills, even arrivals: MaxBusy %v, want 1", l.MaxBusy)
	}
	if a, b := MaxPrefillBusy(h, 1, 0.9, 4), MaxPrefillBusy(h, 1, 0.9, 40); a.MaxBusy != b.MaxBusy {
		t.Errorf("dispersion beyond %v: %v, want the bound's %v", float64(maxDispersion), b.MaxBusy, a.MaxBusy)
	}
}

// TestArrivalDispersion: the index of dispersion of a replica's arrivals
// is measured across the replicas from their prefill histograms' counts.
func TestArrivalDispersion(t *testing.T) {
	t0 := time.Unix(1000, 0)
	pod := func(uid string, n float64) Pod {
		return Pod{Ready: true, Data: true, Running: 1, KVPercent: 10, UID: uid, Prefill: prefillHist(n)}
	}
	for _, tc := range []struct {
		name string
		took []float64 // requests each replica took in the step
		want float64
	}{
		{"round-robin: even", []float64{20, 20, 20}, 0},
		{"random-like", []float64{16, 24, 20}, 16.0 / 20},
		{"bursty: bounded", []float64{0, 60}, maxDispersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			estimate := func(measured bool) Estimate {
				cfg := DefaultConfig()
				cfg.MeasuredArrivals = measured
				e := New(cfg, nil)
				k := Key{"ns", tc.name}
				var first, second []Pod
				for i, n := range tc.took {
					uid := string(rune('a' + i))
					first = append(first, pod(uid, 5))
					second = append(second, pod(uid, 5+n))
				}
				if _, err := e.Estimate(k, t0, first); err != nil {
					t.Fatal(err)
				}
				est, err := e.Estimate(k, t0.Add(15*time.Second), second)
				if err != nil {
					t.Fatal(err)
				}
				return est
			}
			byDefault, measured := estimate(false), estimate(true)
			near(t, "Dispersion", byDefault.Dispersion, tc.want, 1e-9)
			// By default the prefill term takes Poisson arrivals
			// (M/G/1) whatever is measured; MeasuredArrivals lets a
			// more even router run the prefill busier and a burstier
			// one less busy.
			if byDefault.Prefill.MaxBusy <= 0 || byDefault.Prefill.MaxBusy >= 1 {
				t.Fatalf("default MaxBusy %v: the case must leave the prefill a limit", byDefault.Prefill.MaxBusy)
			}
			if tc.want < 1 && !(measured.Prefill.MaxBusy > byDefault.Prefill.MaxBusy) ||
				tc.want > 1 && !(measured.Prefill.MaxBusy < byDefault.Prefill.MaxBusy) {
				t.Errorf("MaxBusy %v with the measured dispersion %v, %v taking arrivals as random", measured.Prefill.MaxBusy, tc.want, byDefault.Prefill.MaxBusy)
			}
		})
	}
}

// TestEstimatePrefillTerm: the prefill term reads each pod's increase
// between estimates, and asks for more replicas than the KV caches when
// prefill is the limit.
func TestEstimatePrefillTerm(t *testing.T) {
	e := New(DefaultConfig(), nil)
	k := Key{Namespace: "ns", Target: "deployment/llm"}
	t0 := time.Unix(1000, 0)
	// Two replicas, nearly empty KV caches (short outputs), each taking
	// 40 prefills of 0.3-0.5 s in 15 s: 0.4 s * 40 / 15 s = 1.07 busy.
	pod := func(uid string, h *histogram.Histogram) Pod {
		return Pod{Ready: true, Data: true, Running: 2, Waiting: 0, KVPercent: 10, UID: uid, Prefill: h}
	}
	first := []Pod{pod("a", prefillHist(10, 100)), pod("b", prefillHist(10, 100))}
	est, err := e.Estimate(k, t0, first)
	if err != nil {
		t.Fatal(err)
	}
	if est.PrefillBusy != 0 || est.PrefillNeeded != 0 {
		t.Fatalf("first estimate has no increase yet: busy %v needed %v", est.PrefillBusy, est.PrefillNeeded)
	}
	// Pod c is Ready but idle, so the demand stays flat.
	idle := pod("c", prefillHist(0, 500))
	idle.Running = 0
	second := []Pod{pod("a", prefillHist(10, 140)), pod("b", prefillHist(10, 140)), idle}
	est, err = e.Estimate(k, t0.Add(15*time.Second), second)
	if err != nil {
		t.Fatal(err)
	}
	// Pod c is new: its counts since its start are not this window's.
	near(t, "PrefillBusy", est.PrefillBusy, 80*0.4/15, 1e-9)
	if !est.Prefill.Reachable || est.Prefill.Requests != 80 {
		t.Fatalf("Prefill = %+v, want a reachable limit over 80 requests", est.Prefill)
	}
	// The demand is flat, so nothing grows the window's work.
	near(t, "PrefillNeeded", est.PrefillNeeded, est.PrefillBusy/est.Prefill.MaxBusy, 1e-9)
	if !(est.PrefillNeeded > est.KVNeeded) || est.Needed != est.PrefillNeeded {
		t.Errorf("prefill-bound: Needed %v, KV %v, prefill %v", est.Needed, est.KVNeeded, est.PrefillNeeded)
	}
	near(t, "Utilization", est.Utilization, est.Needed/3, 1e-9)

	// A minute later the window holds only increases within it.
	third := []Pod{pod("a", prefillHist(10, 140)), pod("b", prefillHist(10, 140)), idle}
	est, err = e.Estimate(k, t0.Add(90*time.Second), third)
	if err != nil {
		t.Fatal(err)
	}
	if est.PrefillBusy != 0 {
		t.Errorf("PrefillBusy = %v after a quiet window, want 0", est.PrefillBusy)
	}
}

// TestPrefillTimeScale: servers whose clocks run faster than the
// estimator's (a replay) do the same prefill work in less of its time.
func TestPrefillTimeScale(t *testing.T) {
	busy := func(scale float64) float64 {
		cfg := DefaultConfig()
		cfg.TimeScale = scale
		e := New(cfg, nil)
		k := Key{Namespace: "ns", Target: "deployment/llm"}
		t0 := time.Unix(1000, 0)
		pod := func(h *histogram.Histogram) []Pod {
			return []Pod{{Ready: true, Data: true, Running: 2, KVPercent: 10, UID: "a", Prefill: h}}
		}
		if _, err := e.Estimate(k, t0, pod(prefillHist(0, 10))); err != nil {
			t.Fatal(err)
		}
		est, err := e.Estimate(k, t0.Add(10*time.Second), pod(prefillHist(0, 40)))
		if err != nil {
			t.Fatal(err)
		}
		return est.PrefillBusy
	}
	near(t, "busy at scale 1", busy(1), 30*0.4/10, 1e-9)
	near(t, "busy at scale 6", busy(6), 30*0.4/60, 1e-9)
}

// TestPrefillWindowCallRate: however often the signal is asked for, the
// window keeps a bounded number of steps and measures the same prefill
// work.
func TestPrefillWindowCallRate(t *testing.T) {
	run := func(every time.Duration) (busy float64, steps int) {
		e := New(DefaultConfig(), nil)
		k := Key{Namespace: "ns", Target: "deployment/llm"}
		t0 := time.Unix(1000, 0)
		var est Estimate
		for at := time.Duration(0); at <= 3*time.Minute; at += every {
			// The replica is scraped every 5 s and finished 4 prefills
			// of 0.15 s each time: 0.12 of a replica busy.
			n := float64(4 * (at / (5 * time.Second)))
			pods := []Pod{{Ready: true, Data: true, Running: 2, KVPercent: 10, UID: "a", Prefill: prefillHist(n)}}
			var err error
			if est, err = e.Estimate(k, t0.Add(at), pods); err != nil {
				t.Fatal(err)
			}
		}
		return est.PrefillBusy, len(e.state[k].prefill.steps)
	}
	slow, slowSteps := run(15 * time.Second)
	for _, every := range []time.Duration{time.Second, 100 * time.Millisecond, 10 * time.Millisecond} {
		busy, steps := run(every)
		if steps > windowSlots+1 {
			t.Errorf("asked every %v: %d steps kept, want at most %d", every, steps, windowSlots+1)
		}
		near(t, fmt.Sprintf("busy asked every %v", every), busy, slow, 0.02)
	}
	near(t, "busy asked every 15s", slow, 0.12, 0.01)
	if slowSteps > windowSlots+1 {
		t.Errorf("asked every 15s: %d steps", slowSteps)
	}
}

// TestPrefillBacklog: the waiting requests' prefill work at the window's
// mean prefill time, over the horizon or, when that is shorter or unknown,
// the objective.
func TestPrefillBacklog(t *testing.T) {
	window := prefillHist(0, 10) // 10 prefills of 0.3-0.5 s: mean 0.4 s
	for _, c := range []struct {
		name                        string
		waiting, horizon, objective float64
		inc                         *histogram.Histogram
		want                        float64
	}{
		{"no queue", 0, 30, 1, window, 0},
		{"over the horizon", 100, 30, 1, window, 100 * 0.4 / 30},
		{"horizon unknown: the objective", 100, 0, 1, window, 100 * 0.4},
		{"horizon shorter than the objective", 100, 0.5, 2, window, 100 * 0.4 / 2},
		{"no prefill measured", 100, 30, 1, prefillHist(), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			near(t, c.name, prefillBacklog(c.waiting, c.inc, c.horizon, c.objective), c.want, 1e-9)
		})
	}
}

// TestEstimatePrefillBacklog: replicas whose queue holds 60 requests need
// that queue's prefill work on top of what they finish: with a flat demand
// and a 30 s horizon, 60 x 0.4 s / 30 s = 0.8 replicas' worth more.
func TestEstimatePrefillBacklog(t *testing.T) {
	e := New(DefaultConfig(), nil)
	k := Key{Namespace: "ns", Target: "deployment/queued"}
	t0 := time.Unix(1000, 0)
	pod := func(uid string, h *histogram.Histogram) Pod {
		return Pod{Ready: true, Data: true, Startup: 30 * time.Second, Running: 2, Waiting: 30, KVPercent: 10, UID: uid, Prefill: h}
	}
	if _, err := e.Estimate(k, t0, []Pod{pod("a", prefillHist(10, 100)), pod("b", prefillHist(10, 100))}); err != nil {
		t.Fatal(err)
	}
	est, err := e.Estimate(k, t0.Add(15*time.Second), []Pod{pod("a", prefillHist(10, 140)), pod("b", prefillHist(10, 140))})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "PrefillBacklog", est.PrefillBacklog, 60*0.4/30, 1e-9)
	near(t, "PrefillNeeded", est.PrefillNeeded, (est.PrefillBusy+est.PrefillBacklog)/est.Prefill.MaxBusy, 1e-9)
}
