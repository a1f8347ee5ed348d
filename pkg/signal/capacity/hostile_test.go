package capacity

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// blockedAfter is how long a test waits for an estimate that must not be
// held up before calling it blocked: far longer than any estimate takes,
// far shorter than the minutes a blocked one would wait.
const blockedAfter = 30 * time.Second

// TestHostileSlotsDoNotHoldOtherNamespaces: a tenant's pods report, in
// range, 1,000 requests running in a KV cache 1e-10 used, which makes 1e13
// slots a replica. The estimate of its workload still ends, with the slots
// held to what a server can hold, and another namespace's estimate, asked
// at the same time, is not held up by it. (An estimate once took time
// linear in the slots under one lock for every namespace: minutes at 1e9.)
func TestHostileSlotsDoNotHoldOtherNamespaces(t *testing.T) {
	e := New(DefaultConfig(), NewMetrics())
	t0 := time.Unix(1000, 0)
	hostile := []Pod{{Ready: true, Data: true, Startup: time.Minute, Running: 1000, Waiting: 5, KVPercent: 1e-8}}
	healthy := []Pod{{Ready: true, Data: true, Startup: time.Minute, Running: 10, Waiting: 1, KVPercent: 50}}

	type result struct {
		est Estimate
		err error
	}
	attack, victim := make(chan result, 1), make(chan result, 1)
	go func() {
		est, err := e.Estimate(Key{"attacker", "deployment/llm"}, t0, hostile)
		attack <- result{est, err}
	}()
	go func() {
		est, err := e.Estimate(Key{"tenant", "deployment/llm"}, t0, healthy)
		victim <- result{est, err}
	}()
	for name, ch := range map[string]chan result{"the other namespace's": victim, "the hostile": attack} {
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatalf("%s estimate: %v", name, r.err)
			}
			if r.est.Slots > maxSlots || math.IsNaN(r.est.Utilization) || math.IsInf(r.est.Utilization, 0) {
				t.Errorf("%s estimate: slots %g, utilization %g", name, r.est.Slots, r.est.Utilization)
			}
		case <-time.After(blockedAfter):
			t.Fatalf("%s estimate did not end within %v", name, blockedAfter)
		}
	}
}

// TestEstimatesHoldOnlyTheirOwnTarget: while one target's estimate is in
// progress (its lock held), estimates of other targets, of the same
// namespace or another, go ahead.
func TestEstimatesHoldOnlyTheirOwnTarget(t *testing.T) {
	e := New(DefaultConfig(), nil)
	t0 := time.Unix(1000, 0)
	pods := []Pod{{Ready: true, Data: true, Running: 10, KVPercent: 50}}
	busy := Key{"a", "deployment/slow"}
	if _, err := e.Estimate(busy, t0, pods); err != nil {
		t.Fatal(err)
	}
	e.state[busy].mu.Lock() // an estimate of busy in progress
	defer e.state[busy].mu.Unlock()
	for _, k := range []Key{{"a", "deployment/other"}, {"b", "deployment/slow"}, {"b", "model/x"}} {
		done := make(chan error, 1)
		go func() {
			_, err := e.Estimate(k, t0.Add(time.Second), pods)
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%v: %v", k, err)
			}
		case <-time.After(blockedAfter):
			t.Fatalf("%v held up by an estimate of %v", k, busy)
		}
	}
}

// TestStatesAreBounded: asking about names no pod serves keeps nothing;
// names that do have data get state up to the per-namespace and total
// bounds, past which they are refused with ErrTooManyTargets (counted),
// without costing another namespace its own.
func TestStatesAreBounded(t *testing.T) {
	m := NewMetrics()
	e := New(Config{Quantile: 0.9, Forget: 10 * time.Minute, MaxTargetsPerNamespace: 8, MaxTargets: 12}, m)
	t0 := time.Unix(1000, 0)
	data := []Pod{{Ready: true, Data: true, Running: 4, KVPercent: 40}}
	for i := range 20_000 {
		_, err := e.Estimate(Key{"attacker", fmt.Sprintf("model/m%d", i)}, t0, []Pod{{Ready: true}})
		if !errors.Is(err, ErrNoData) {
			t.Fatalf("a model nobody serves: %v", err)
		}
	}
	if len(e.state) != 0 {
		t.Fatalf("%d states kept for names no pod serves", len(e.state))
	}
	for i := range 20 {
		_, err := e.Estimate(Key{"attacker", fmt.Sprintf("model/m%d", i)}, t0, data)
		if want := i >= 8; errors.Is(err, ErrTooManyTargets) != want {
			t.Fatalf("target %d of one namespace: %v", i, err)
		}
	}
	for i := range 4 {
		if _, err := e.Estimate(Key{"tenant", fmt.Sprintf("deployment/d%d", i)}, t0, data); err != nil {
			t.Fatalf("another namespace's target %d: %v", i, err)
		}
	}
	if _, err := e.Estimate(Key{"third", "deployment/d"}, t0, data); !errors.Is(err, ErrTooManyTargets) {
		t.Fatalf("past the total: %v", err)
	}
	if _, err := e.Estimate(Key{"attacker", "model/m3"}, t0, data); err != nil {
		t.Fatalf("a target already kept: %v", err)
	}
	if n := len(e.state); n != 12 {
		t.Errorf("%d states, want the total bound 12", n)
	}
	if got := testCounter(t, m, "too_many_targets"); got != 13 {
		t.Errorf("too_many_targets counted %g times, want 13", got)
	}
	// Forgotten states free their room.
	if _, err := e.Estimate(Key{"third", "deployment/d"}, t0.Add(11*time.Minute), data); err != nil {
		t.Fatalf("after the others were forgotten: %v", err)
	}
	if n := len(e.state); n != 1 {
		t.Errorf("%d states after forgetting, want 1", n)
	}
}

func testCounter(t *testing.T, m *Metrics, reason string) float64 {
	t.Helper()
	return testutil.ToFloat64(m.errors.WithLabelValues(reason))
}

// TestPrefillStepsAreBounded: pods of one workload that each export a
// prefill bucket layout of their own, or change theirs every other read,
// read every 50 ms, leave steps of a bounded size and number.
func TestPrefillStepsAreBounded(t *testing.T) {
	layout := func(id, n int) *histogram.Histogram {
		h := &histogram.Histogram{}
		for b := range 63 {
			h.Bounds = append(h.Bounds, float64(id*100+b+1)/1e3)
			h.Counts = append(h.Counts, float64(n*(b+1)))
		}
		h.Bounds = append(h.Bounds, math.Inf(1))
		h.Counts = append(h.Counts, float64(n*64))
		h.Count, h.Sum = float64(n*64), float64(n)
		return h
	}
	for _, tc := range []struct {
		name   string
		pods   int
		layout func(pod, read int) int
	}{
		{"a layout per pod", 50, func(pod, _ int) int { return pod }},
		{"layouts changing every other read", 4, func(pod, read int) int { return pod*1000 + (read+pod)/2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := New(DefaultConfig(), nil)
			k := Key{"attacker", "deployment/llm"}
			t0 := time.Unix(1000, 0)
			maxBuckets := 0
			for i := range 1200 {
				pods := make([]Pod, tc.pods)
				for p := range pods {
					pods[p] = Pod{Ready: true, Data: true, Running: 4, KVPercent: 40, UID: fmt.Sprint(p), Prefill: layout(tc.layout(p, i), i)}
				}
				if _, err := e.Estimate(k, t0.Add(time.Duration(i)*50*time.Millisecond), pods); err != nil {
					t.Fatal(err)
				}
				for _, s := range e.state[k].prefill.steps {
					maxBuckets = max(maxBuckets, len(s.inc.Bounds))
				}
			}
			if n := len(e.state[k].prefill.steps); n > windowSlots+1 {
				t.Errorf("%d steps kept, want at most %d", n, windowSlots+1)
			}
			if maxBuckets > 4*64 {
				t.Errorf("a step of %d buckets, want at most %d", maxBuckets, 4*64)
			}
		})
	}
}
