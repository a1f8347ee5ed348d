package capacity

import (
	"errors"
	"math"
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
				h.Observe(at, y, tc.tau/2, tc.tau)
			}
			near(t, "trend", h.Trend(), tc.slope, 1e-3)
			near(t, "level", h.Level(), y, 1e-2)
			near(t, "forecast 60s ahead", h.Forecast(time.Minute), y+60*tc.slope, 0.1)
		})
	}
}

func TestHoltSmoothsAStepByTime(t *testing.T) {
	// The same step observed at two rates moves the level by the same
	// amount over the same time.
	t0 := time.Unix(0, 0)
	levelAfter := func(step time.Duration) float64 {
		var h Holt
		h.Observe(t0, 0, 10*time.Second, 10*time.Second)
		for at := step; at <= 10*time.Second; at += step {
			h.Observe(t0.Add(at), 10, 10*time.Second, 10*time.Second)
		}
		return h.Level()
	}
	near(t, "level after 10s, observed each 5s vs 1s", levelAfter(5*time.Second), levelAfter(time.Second), 1.5)
	var h Holt
	h.Observe(t0, 5, time.Second, time.Second)
	h.Observe(t0, 50, time.Second, time.Second) // same instant: ignored
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
	// one; with no history the forecast is today's demand.
	est, err := e.Estimate(k, t0, []Pod{ready(10, 0, 50), ready(10, 0, 50), {Loading: true}, {Ready: true}})
	if err != nil {
		t.Fatal(err)
	}
	per := MaxLoad(20, 0.1)
	near(t, "slots", est.Slots, 20, 1e-9)
	near(t, "per replica", est.PerReplica, per, 1e-9)
	near(t, "forecast", est.Forecast, 20, 1e-9)
	near(t, "utilization", est.Utilization, 20/(2*per), 1e-9)
	near(t, "needed", est.Needed, 20/per, 1e-9)
	near(t, "loading credit", est.LoadingCredit, per, 1e-9)
	if est.Replicas != 2 || est.Loading != 1 || est.Horizon != time.Minute {
		t.Errorf("replicas %d loading %d horizon %v", est.Replicas, est.Loading, est.Horizon)
	}

	// Demand rising by 1 request a second for a minute: the forecast
	// looks a horizon (1 minute) ahead, so it exceeds today's demand.
	var last Estimate
	for i := 1; i <= 60; i++ {
		d := 20 + float64(i)
		last, err = e.Estimate(k, t0.Add(time.Duration(i)*time.Second), []Pod{ready(d/2, 0, d/2*5), ready(d/2, 0, d/2*5)})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !(last.Forecast > last.Demand+20) {
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
