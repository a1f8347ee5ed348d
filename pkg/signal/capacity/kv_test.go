package capacity

import (
	"math"
	"testing"
	"time"
)

func TestMaxKVLoad(t *testing.T) {
	z90 := normalQuantile(0.9) // 1.2816
	for _, tc := range []struct {
		name                   string
		kbar, dispersion, late float64
		want                   float64 // NaN: check the defining equation instead
	}{
		{"no spread: the cache less one request", 0.25, 0, 0.1, 0.75},
		{"half may wait: no headroom", 0.19, 0.5, 0.5, 0.81},
		{"z sqrt(D) = 1, room 3/4: sqrt(mu) = 1/2", 0.25, 1 / (z90 * z90), 0.1, 0.25},
		{"equal short requests at random", 0.01, 0.01, 0.1, math.NaN()},
		{"heavy-tailed long prompts", 0.3, 0.6, 0.13, math.NaN()},
		{"a request the size of the cache", 1, 0.5, 0.1, 0},
		{"no request measured", 0, 0.5, 0.1, 0},
		{"no late request allowed", 0.1, 0.5, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := MaxKVLoad(tc.kbar, tc.dispersion, tc.late)
			if !math.IsNaN(tc.want) {
				near(t, "MaxKVLoad", got, tc.want, 1e-12)
				return
			}
			// mu + z sqrt(D mu) = 1 - kbar, mu inside (0, 1 - kbar).
			z := normalQuantile(1 - tc.late)
			near(t, "mean + z sd", got+z*math.Sqrt(tc.dispersion*got), 1-tc.kbar, 1e-12)
			if !(got > 0 && got < 1-tc.kbar) {
				t.Errorf("MaxKVLoad = %g, want inside (0, %g)", got, 1-tc.kbar)
			}
		})
	}
	// A wider spread of the KV in use (a heavier tail, a random router)
	// leaves less of the cache usable.
	prev := 1.0
	for _, d := range []float64{0.01, 0.05, 0.2, 0.5, 1} {
		got := MaxKVLoad(0.1, d, 0.1)
		if !(got < prev) {
			t.Errorf("MaxKVLoad at dispersion %g = %g, not below %g", d, got, prev)
		}
		prev = got
	}
}

func TestNormalQuantile(t *testing.T) {
	near(t, "median", normalQuantile(0.5), 0, 1e-12)
	near(t, "p90", normalQuantile(0.9), 1.2815515655446004, 1e-9)
	near(t, "p97.5", normalQuantile(0.975), 1.959963984540054, 1e-9)
}

func TestLateBudget(t *testing.T) {
	for _, tc := range []struct {
		q, slack, residence, want float64
	}{
		{0.9, 0, 0, 0.1},            // any wait is a miss
		{0.9, 0, 20, 0.1},           // no slack
		{0.9, 10, 10, 0.1 * math.E}, // a residence of slack: e times the tail
		{0.99, 2, 0, 0.01},          // residence unmeasured: no credit
		{0.9, 100, 1, 0.5},          // at most half
		{0.9, 7, 28, 0.1 * math.Exp(0.25)},
	} {
		near(t, "LateBudget", LateBudget(tc.q, tc.slack, tc.residence), tc.want, 1e-12)
	}
}

// TestKVTermFromMeasuredSpread: the KV term takes the spread of the KV in
// use across the replicas as measured, and the mean request's share from
// what runs.
func TestKVTermFromMeasuredSpread(t *testing.T) {
	t0 := time.Unix(1000, 0)
	pod := func(running, kv float64) Pod {
		return Pod{Ready: true, Data: true, Startup: time.Minute, Running: running, KVPercent: kv}
	}
	for _, tc := range []struct {
		name           string
		pods           []Pod
		kbar, wantDisp float64
	}{
		// 4 requests in 80% of two caches: 0.2 each. Shares 0.2 and
		// 0.6: mean 0.4, sample variance 0.08.
		{"two replicas", []Pod{pod(1, 20), pod(3, 60)}, 0.2, 0.2},
		// Equal shares: no spread measured, the cache less a request.
		{"even", []Pod{pod(2, 40), pod(2, 40)}, 0.2, 0},
		// One replica: no spread to measure; equal requests at random
		// (the mean request's share).
		{"one replica", []Pod{pod(2, 50)}, 0.25, 0.25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.SpreadKV = true
			e := New(cfg, nil)
			est, err := e.Estimate(Key{"ns", tc.name}, t0, tc.pods)
			if err != nil {
				t.Fatal(err)
			}
			near(t, "KVDispersion", est.KVDispersion, tc.wantDisp, 1e-9)
			near(t, "LateBudget", est.LateBudget, 0.1, 1e-12)
			near(t, "PerReplica", est.PerReplica, MaxKVLoad(tc.kbar, tc.wantDisp, 0.1)/tc.kbar, 1e-9)
			near(t, "KVNeeded", est.KVNeeded, est.Forecast/est.PerReplica, 1e-9)
		})
	}
}

// A replica just Ready holds nothing beside full ones: with SettledSpread
// it is left out of the measured spread for one window, and counted again
// after it.
func TestSettledSpreadLeavesFreshReplicasOut(t *testing.T) {
	t0 := time.Unix(1000, 0)
	pod := func(running, kv float64, readyAt time.Time) Pod {
		return Pod{Ready: true, Data: true, Startup: time.Minute, Running: running, KVPercent: kv, ReadyAt: readyAt}
	}
	settled := t0.Add(-time.Hour)
	for _, tc := range []struct {
		name     string
		settled  bool
		freshAt  time.Time
		wantDisp float64
	}{
		// Shares 0.4, 0.4, 0: mean 0.8/3, sample variance 0.16/3,
		// index 0.2.
		{"counted without the option", false, t0.Add(-10 * time.Second), 0.2},
		// Shares 0.4, 0.4: no spread.
		{"left out within a window", true, t0.Add(-10 * time.Second), 0},
		{"counted after a window", true, t0.Add(-time.Minute), 0.2},
		{"counted when its Ready time is unknown", true, time.Time{}, 0.2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.SpreadKV, cfg.SettledSpread = true, tc.settled
			e := New(cfg, nil)
			est, err := e.Estimate(Key{"ns", tc.name}, t0, []Pod{pod(2, 40, settled), pod(2, 40, settled), pod(0, 0, tc.freshAt)})
			if err != nil {
				t.Fatal(err)
			}
			near(t, "KVDispersion", est.KVDispersion, tc.wantDisp, 1e-9)
			// The fresh replica still counts as Ready capacity.
			if est.Replicas != 3 || est.Reporting != 3 {
				t.Errorf("replicas %d reporting %d, want 3 and 3", est.Replicas, est.Reporting)
			}
		})
	}
}
