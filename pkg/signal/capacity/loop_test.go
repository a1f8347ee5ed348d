package capacity

import (
	"math"
	"testing"
	"time"
)

// TestLoop pins the closed loop's law: by how much, how fast and within
// which bounds the measured TTFT quantile corrects the model.
func TestLoop(t *testing.T) {
	const (
		objective = 1.0
		floor     = 0.2 // the prefills' own quantile: comfortable below 0.6
	)
	horizon, window := time.Minute, time.Minute
	for _, tc := range []struct {
		name        string
		measured    float64
		utilization float64
		settled     bool
		floor       float64
		syncs       int     // 15 s apart, after the first
		want        float64 // the correction
	}{
		// A quarter horizon per sync: four syncs at twice the objective
		// add ln 2, a doubling, the bound.
		{"missed at the asked replicas: doubles in a horizon", 2, 1, true, floor, 4, 2},
		{"bounded at MaxCorrection", 4, 1, true, floor, 12, MaxCorrection},
		{"missed by a tenth: a tenth in a horizon", 1.1, 1, true, floor, 4, 1.1},
		{"missed while short of replicas: no error of the model's", 2, 1.5, true, floor, 8, 1},
		{"missed while replicas load: no error of the model's", 2, 1, false, floor, 8, 1},
		// Met with room: half the rate, by the log of comfortable
		// (0.6) over the measure, at most ln 2 (0.3 and below).
		{"met with room: halves in two horizons", 0.1, 1, true, floor, 8, 0.5},
		{"met with room, one horizon", 0.3, 1, true, floor, 4, math.Sqrt(0.5)},
		{"bounded below", 0.1, 1, true, floor, 40, 1 / MaxCorrection},
		{"met without room: nothing moves", 0.8, 1, true, floor, 8, 1},
		{"met, replicas above what was asked: nothing moves", 0.1, 0.5, true, floor, 8, 1},
		{"unmeasured", math.NaN(), 1, true, floor, 8, 1},
		{"out of reach of any replicas", 3, 1, true, 1.5, 8, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l loop
			t0 := time.Unix(1000, 0)
			for i := 0; i <= tc.syncs; i++ {
				l.update(t0.Add(time.Duration(i)*15*time.Second), tc.measured, objective, tc.floor, tc.utilization, tc.settled, horizon, window, 1/MaxCorrection, MaxCorrection)
			}
			near(t, "correction", l.factor(), tc.want, 1e-9)
		})
	}
}

func TestCorrectionBounds(t *testing.T) {
	for _, tc := range []struct {
		min, max, lo, hi float64
	}{
		{0, 0, 0.5, 2},
		{0.5, 1, 0.5, 1},
		{0.1, 9, 0.5, 2},
		{2, 0.5, 1, 1},
	} {
		lo, hi := Config{MinCorrection: tc.min, MaxCorrection: tc.max}.correctionBounds()
		if lo != tc.lo || hi != tc.hi {
			t.Errorf("bounds of (%v, %v) = (%v, %v), want (%v, %v)", tc.min, tc.max, lo, hi, tc.lo, tc.hi)
		}
	}
}

// TestEstimateClosesTheLoop: through Estimate with the default
// configuration, a measured TTFT quantile over the objective at the
// replicas the model asked for raises the replicas needed, and the parts
// say by how much; with the loop held open (bounds 1 and 1) the same
// measurement changes nothing.
func TestEstimateClosesTheLoop(t *testing.T) {
	if lo, hi := DefaultConfig().correctionBounds(); lo != 1/MaxCorrection || hi != MaxCorrection {
		t.Errorf("default bounds (%v, %v), want the widest, (%v, %v)", lo, hi, 1/MaxCorrection, MaxCorrection)
	}
	open := DefaultConfig()
	open.MinCorrection, open.MaxCorrection = 1, 1
	if est := closeOnMisses(t, open); est.Correction != 1 || est.MeasuredTTFT == 0 {
		t.Errorf("open loop: Correction %v, MeasuredTTFT %v; want 1 and the measurement", est.Correction, est.MeasuredTTFT)
	}
	est := closeOnMisses(t, DefaultConfig())
	if !(est.MeasuredTTFT > 1.5 && est.MeasuredTTFT <= 2) {
		t.Errorf("MeasuredTTFT = %v, want the p90 in (1.5, 2]", est.MeasuredTTFT)
	}
	if !(est.Correction > 1 && est.Correction <= MaxCorrection) {
		t.Errorf("Correction = %v, want above 1 and within the bound", est.Correction)
	}
	near(t, "Needed", est.Needed, est.Correction*max(est.KVNeeded, est.PrefillNeeded), 1e-9)
}

// closeOnMisses estimates one replica, settled at what the model asks,
// whose servers measure every request's TTFT at 1.5-2 s against the 1 s
// objective, for a minute; it returns the last estimate.
func closeOnMisses(t *testing.T, cfg Config) Estimate {
	t.Helper()
	e := New(cfg, nil)
	k := Key{"ns", "deployment/llm"}
	t0 := time.Unix(1000, 0)
	// TTFT in vLLM-like buckets: 20 requests a step, all at 1.5-2 s, over
	// a 1 s objective.
	ttft := func(n float64) Pod {
		return Pod{Ready: true, Data: true, Startup: time.Minute, Running: 10, KVPercent: 50, UID: "a", TTFT: prefillHist(0, 0, 0, 0, 0, n)}
	}
	var est Estimate
	var err error
	for i := 0; i <= 4; i++ {
		est, err = e.Estimate(k, t0.Add(time.Duration(i)*15*time.Second), []Pod{ttft(20 * float64(i))})
		if err != nil {
			t.Fatal(err)
		}
	}
	return est
}
