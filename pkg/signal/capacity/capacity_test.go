package capacity

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %.6g, want %.6g (±%g)", what, got, want, tol)
	}
}

func TestErlangC(t *testing.T) {
	for _, tc := range []struct {
		c    int
		a    float64
		want float64
	}{
		{1, 0.5, 0.5},   // M/M/1: P(wait) = rho
		{2, 1, 1.0 / 3}, // M/M/2 at a = 1
		{3, 2, 4.0 / 9}, // B(3,2) = 4/19; C = 3B/(3-2(1-B)) = 4/9
		{5, 0, 0},       // no load, no wait
		{4, 4, 1},       // saturated
		{4, 9, 1},       // past saturation
		{0, 1, 1},       // no slot at all
	} {
		near(t, "ErlangC", ErlangC(tc.c, tc.a), tc.want, 1e-12)
	}
}

func TestMaxLoad(t *testing.T) {
	near(t, "MaxLoad(1, 0.1)", MaxLoad(1, 0.1), 0.1, 1e-6)
	near(t, "MaxLoad(2, 1/3)", MaxLoad(2, 1.0/3), 1, 1e-6)
	for _, c := range []int{1, 5, 10, 20, 23, 50, 200} {
		l := MaxLoad(c, 0.1)
		near(t, "ErlangC at MaxLoad", ErlangC(c, l), 0.1, 1e-6)
		if l >= float64(c) || l <= 0 {
			t.Errorf("MaxLoad(%d) = %g out of (0, c)", c, l)
		}
	}
	// Pooling: the share of the slots usable rises with their number.
	prev := 0.0
	for _, c := range []int{1, 2, 5, 10, 20, 50, 100} {
		share := MaxLoad(c, 0.1) / float64(c)
		if share <= prev {
			t.Errorf("usable share at c=%d is %g, not above %g", c, share, prev)
		}
		prev = share
	}
	if MaxLoad(0, 0.1) != 0 || MaxLoad(5, 0) != 0 || MaxLoad(5, 1) != 5 {
		t.Error("MaxLoad edge cases")
	}
}

func TestHoltFollowsALinearTrend(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name  string
		step  time.Duration
		tau   time.Duration
		slope float64 // per second
	}{
		{"regular, rising", time.Second, 10 * time.Second, 2},
		{"sparse, falling", 7 * time.Second, 30 * time.Second, -0.5},
		{"flat", 3 * time.Second, 10 * time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Holt
			var at time.Time
			var y float64
			for i := range 200 {
				at = t0.Add(time.Duration(i) * tc.step)
				y = 100 + tc.slope*at.Sub(t0).Seconds()
				h.Observe(at, y, Smoothing{Level: tc.tau / 2, Trend: tc.tau})
			}
			near(t, "trend", h.Trend(), tc.slope, 1e-3)
			near(t, "level", h.Level(), y, 1e-2)
			near(t, "forecast 60s ahead", h.Forecast(time.Minute), y+60*tc.slope, 0.1)
		})
	}
}

func TestDampedHoltForecast(t *testing.T) {
	t0 := time.Unix(0, 0)
	const horizon = time.Minute
	sm := ForecastSmoothing(horizon)
	series := func(n int, y func(i int) float64) *Holt {
		var h Holt
		for i := range n {
			h.Observe(t0.Add(time.Duration(i)*5*time.Second), y(i), sm)
		}
		return &h
	}

	t.Run("constant: no trend", func(t *testing.T) {
		h := series(200, func(int) float64 { return 42 })
		if h.Trend() != 0 || h.TrendStdErr() != 0 || h.Forecast(horizon) != 42 {
			t.Errorf("trend %g, stderr %g, forecast %g; want 0, 0, 42", h.Trend(), h.TrendStdErr(), h.Forecast(horizon))
		}
	})

	t.Run("ramp: forecast leads it, by less than a linear trend", func(t *testing.T) {
		const slope = 0.5 // per second
		h := series(200, func(i int) float64 { return 20 + slope*float64(i*5) })
		y := 20 + slope*float64(199*5)
		// Continuous-time steady state of a damped trend on a ramp:
		// trend = slope * Damping / (Damping + Trend time constant) = 2/3
		// of it; sampling every 5 s lands a little above.
		near(t, "trend", h.Trend(), slope*2/3, 0.03)
		if h.TrendStdErr() > 1e-6 || math.Abs(h.SignificantTrend()-h.Trend()) > 1e-5 {
			t.Errorf("a noiseless ramp's trend was judged noisy: stderr %g", h.TrendStdErr())
		}
		f := h.Forecast(horizon)
		if !(f > y && f < y+slope*horizon.Seconds()) {
			t.Errorf("forecast %g a horizon ahead of %g: want above it and below the linear %g", f, y, y+slope*horizon.Seconds())
		}
		// Damped: however far ahead, no more than trend x Damping.
		near(t, "forecast an hour ahead", h.Forecast(time.Hour), h.Level()+h.Trend()*sm.Damping.Seconds(), 1e-3)
	})

	t.Run("white noise: forecast as close to the mean as the level", func(t *testing.T) {
		for _, sigma := range []float64{1, 5, 20} {
			r := rand.New(rand.NewPCG(1, uint64(sigma)))
			var h, linear Holt
			var sq, sqLevel, sqLinear float64
			var worst float64
			for i := range 720 {
				y := 50 + sigma*r.NormFloat64()
				at := t0.Add(time.Duration(i) * 5 * time.Second)
				h.Observe(at, y, sm)
				linear.Observe(at, y, Smoothing{Level: sm.Level, Trend: sm.Trend})
				if i < 24 {
					continue // the first two minutes settle
				}
				d := h.Forecast(horizon) - 50
				sq += d * d
				sqLevel += (h.Level() - 50) * (h.Level() - 50)
				dl := linear.Level() + linear.Trend()*horizon.Seconds() - 50 // ungated
				sqLinear += dl * dl
				worst = max(worst, math.Abs(d))
			}
			// The level alone is the best a forecast of no trend can do;
			// the significance test keeps the forecast within a tenth of
			// it, where an ungated linear trend times the horizon more
			// than doubles it.
			if sq > 1.1*1.1*sqLevel {
				t.Errorf("sigma %g: forecast RMS %.3g against the level's %.3g", sigma, math.Sqrt(sq/696), math.Sqrt(sqLevel/696))
			}
			if sqLinear < 2*2*sqLevel {
				t.Errorf("sigma %g: the linear forecast's RMS %.3g is not the noise amplifier this guards against (level %.3g)", sigma, math.Sqrt(sqLinear/696), math.Sqrt(sqLevel/696))
			}
			// Bounded: the level's weight over 5 s leaves its noise at
			// sigma*sqrt(a/(2-a)) = 0.44 sigma; 4.5 of those is 2 sigma.
			if worst > 2*sigma {
				t.Errorf("sigma %g: forecast strayed %.3g from the mean", sigma, worst)
			}
		}
	})

	t.Run("ramp in noise: the trend shows once it exceeds its noise", func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 4))
		h := series(200, func(i int) float64 { return 20 + 0.5*float64(i*5) + 5*r.NormFloat64() })
		if h.SignificantTrend() <= 0 || h.SignificantTrend() >= h.Trend() {
			t.Errorf("significant trend %g of %g (stderr %g): want positive and shrunk", h.SignificantTrend(), h.Trend(), h.TrendStdErr())
		}
		if h.Forecast(horizon) <= h.Level() {
			t.Errorf("forecast %g not above the level %g of a rising series", h.Forecast(horizon), h.Level())
		}
	})
}

func TestHoltSmoothsAStepByTime(t *testing.T) {
	// The same step observed at two rates moves the level by the same
	// amount over the same time.
	t0 := time.Unix(0, 0)
	levelAfter := func(step time.Duration) float64 {
		var h Holt
		h.Observe(t0, 0, Smoothing{Level: 10 * time.Second, Trend: 10 * time.Second})
		for at := step; at <= 10*time.Second; at += step {
			h.Observe(t0.Add(at), 10, Smoothing{Level: 10 * time.Second, Trend: 10 * time.Second})
		}
		return h.Level()
	}
	near(t, "level after 10s, observed each 5s vs 1s", levelAfter(5*time.Second), levelAfter(time.Second), 1.5)
	var h Holt
	h.Observe(t0, 5, Smoothing{Level: time.Second, Trend: time.Second})
	h.Observe(t0, 50, Smoothing{Level: time.Second, Trend: time.Second}) // same instant: ignored
	if h.Level() != 5 || h.Len() != 1 {
		t.Errorf("an observation at the same time moved the state: level %g, n %d", h.Level(), h.Len())
	}
}

func TestEstimate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ready := func(running, waiting, kv float64) Pod {
		return Pod{Ready: true, Data: true, Startup: time.Minute, Running: running, Waiting: waiting, KVPercent: kv}
	}
	e := New(DefaultConfig(), NewMetrics())
	k := Key{"ns", "deployment/llm"}

	// Two replicas each hold 10 requests at half their KV cache: 20 fit
	// one. A third is Ready but has no fresh data: the Service gives it
	// as many requests as the others, so it counts 10. With no history
	// the forecast is today's demand.
	est, err := e.Estimate(k, t0, []Pod{ready(10, 0, 50), ready(10, 0, 50), {Loading: true}, {Ready: true}})
	if err != nil {
		t.Fatal(err)
	}
	per := MaxLoad(20, 0.1)
	near(t, "slots", est.Slots, 20, 1e-9)
	near(t, "per replica", est.PerReplica, per, 1e-9)
	near(t, "demand", est.Demand, 30, 1e-9)
	near(t, "forecast", est.Forecast, 30, 1e-9)
	near(t, "utilization", est.Utilization, 30/(3*per), 1e-9)
	near(t, "needed", est.Needed, 30/per, 1e-9)
	near(t, "loading credit", est.LoadingCredit, per, 1e-9)
	if est.Replicas != 3 || est.Reporting != 2 || est.Loading != 1 || est.Horizon != time.Minute {
		t.Errorf("replicas %d reporting %d loading %d horizon %v", est.Replicas, est.Reporting, est.Loading, est.Horizon)
	}

	// Demand rising by 1 request a second for a minute and a half, read
	// at the HPA's 15 s syncs: the forecast looks a horizon (1 minute)
	// ahead, so it exceeds today's demand, damped: by less than the 60 a
	// linear trend would add.
	var last Estimate
	for i := 15; i <= 90; i += 15 {
		d := 20 + float64(i)
		last, err = e.Estimate(Key{"ns", "deployment/rising"}, t0.Add(time.Duration(i)*time.Second), []Pod{ready(d/2, 0, d/2*5), ready(d/2, 0, d/2*5)})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !(last.Forecast > last.Demand+10 && last.Forecast < last.Demand+60) {
		t.Errorf("rising demand %g: forecast %g does not look ahead", last.Demand, last.Forecast)
	}

	// Queued requests are demand: long prompts hold a quarter of the KV
	// each, so 4 fit and 1 replica serves MaxLoad(4, 0.1) of them.
	k2 := Key{"ns", "deployment/long"}
	est, err = e.Estimate(k2, t0, []Pod{ready(2, 6, 50)})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "long-prompt slots", est.Slots, 4, 1e-9)
	near(t, "long-prompt utilization", est.Utilization, 8/MaxLoad(4, 0.1), 1e-9)

	// The slot size measured earlier stands while nothing runs.
	est, err = e.Estimate(k2, t0.Add(time.Second), []Pod{ready(0, 3, 0)})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "slots kept", est.Slots, 4, 1e-9)

	// Idle: zero, a real measurement.
	est, err = e.Estimate(Key{"ns", "deployment/idle"}, t0, []Pod{ready(0, 0, 0)})
	if err != nil || est.Utilization != 0 {
		t.Errorf("idle: %v, %v", est.Utilization, err)
	}
}

// TestEstimateThroughMissedScrapes: replicas that miss a scrape change
// neither the demand nor the replicas asked for, and the HPA's answer
// (the ratio times every Ready replica) stays the replicas needed.
func TestEstimateThroughMissedScrapes(t *testing.T) {
	t0 := time.Unix(0, 0)
	e := New(DefaultConfig(), nil)
	k := Key{"ns", "deployment/llm"}
	full := Pod{Ready: true, Data: true, Startup: time.Minute, Running: 12, Waiting: 0, KVPercent: 50}
	stale := Pod{Ready: true, Startup: time.Minute}
	var first Estimate
	for i, pods := range [][]Pod{
		{full, full, full, full, full, full},
		{full, stale, stale, stale, stale, stale},
		{full, full, full, stale, stale, stale},
		{full, full, full, full, full, full},
	} {
		est, err := e.Estimate(k, t0.Add(time.Duration(i)*15*time.Second), pods)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = est
		}
		near(t, "demand", est.Demand, 72, 1e-9)
		near(t, "needed", est.Needed, first.Needed, 1e-9)
		near(t, "HPA's answer", est.Utilization*float64(est.Replicas), first.Needed, 1e-9)
		if est.Replicas != 6 {
			t.Errorf("step %d: %d Ready replicas, want 6", i, est.Replicas)
		}
	}
}

func TestEstimateNeverMakesUpAValue(t *testing.T) {
	t0 := time.Unix(0, 0)
	e := New(DefaultConfig(), NewMetrics())
	for _, tc := range []struct {
		name string
		pods []Pod
		want error
	}{
		{"no pods", nil, ErrNoData},
		{"only loading", []Pod{{Loading: true}}, ErrNoData},
		{"ready without data", []Pod{{Ready: true}}, ErrNoData},
		{"queue but nothing ever ran", []Pod{{Ready: true, Data: true, Waiting: 5}}, ErrNoCapacity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Estimate(Key{"ns", tc.name}, t0, tc.pods)
			if !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestForget(t *testing.T) {
	t0 := time.Unix(0, 0)
	e := New(Config{Quantile: 0.9, Forget: time.Minute}, NewMetrics())
	pods := []Pod{{Ready: true, Data: true, Running: 1, KVPercent: 10}}
	if _, err := e.Estimate(Key{"a", "x"}, t0, pods); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Estimate(Key{"b", "y"}, t0.Add(2*time.Minute), pods); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.state[Key{"a", "x"}]; ok || len(e.state) != 1 {
		t.Errorf("state after forgetting: %v", e.state)
	}
}

// TestForecastIgnoresExtraReaders: readers that ask for the signal far more
// often than the HPA do not add observations to the forecast, so they do
// not change what the HPA reads.
func TestForecastIgnoresExtraReaders(t *testing.T) {
	// run reads the signal at the HPA's syncs (every 15 s) and, if extra
	// is not 0, every extra as well; it returns the HPA's last reading.
	run := func(extra time.Duration) (Estimate, int) {
		e := New(DefaultConfig(), nil)
		k := Key{Namespace: "ns", Target: "deployment/llm"}
		t0 := time.Unix(1000, 0)
		var atHPA Estimate
		for at := time.Duration(0); at <= 5*time.Minute; at += 50 * time.Millisecond {
			hpa := at%(15*time.Second) == 7*time.Second
			if !hpa && (extra == 0 || at%extra != 0) {
				continue
			}
			// The demand, scraped every 5 s: a slow ramp with noise.
			scrape := int(at / (5 * time.Second))
			demand := 100 + float64(scrape)/2 + float64(scrape*7919%13)
			pods := []Pod{{Ready: true, Data: true, Running: demand, KVPercent: demand / 2, Startup: time.Minute}}
			est, err := e.Estimate(k, t0.Add(at), pods)
			if err != nil {
				t.Fatal(err)
			}
			if hpa {
				atHPA = est
			}
		}
		return atHPA, e.state[k].holt.Len()
	}
	alone, _ := run(0)
	for _, extra := range []time.Duration{time.Second, 50 * time.Millisecond} {
		crowded, n := run(extra)
		if want := int(5*time.Minute/observeGap(time.Minute)) + 1; n > want {
			t.Errorf("read every %v: %d observations, want at most %d", extra, n, want)
		}
		near(t, fmt.Sprintf("forecast with a reader every %v", extra), crowded.Forecast, alone.Forecast, 0.01*alone.Forecast)
	}
}
