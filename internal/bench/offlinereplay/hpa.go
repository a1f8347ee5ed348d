package offlinereplay

import (
	"math"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
)

// Behavior is an HPA's scaling behavior (autoscaling/v2), as the HPA
// controller applies it.
type Behavior struct {
	// UpWindow and DownWindow are the stabilization windows.
	UpWindow, DownWindow time.Duration
	// Up and Down are the rate policies. Of each direction's, the
	// controller takes the one that allows the largest change (selectPolicy
	// Max, its default), each relative to the replicas at the start of its
	// own period.
	Up, Down    []Rate
	MinReplicas int
	MaxReplicas int
}

// Rate is one scaling policy (autoscalingv2.HPAScalingPolicy): Value pods,
// or Value percent of the replicas at the period's start, per Period.
type Rate struct {
	Percent bool
	Value   int
	Period  time.Duration
}

// Pods is a rate of n pods per period.
func Pods(n int, period time.Duration) Rate { return Rate{Value: n, Period: period} }

// Percent is a rate of p percent per period.
func Percent(p int, period time.Duration) Rate { return Rate{Percent: true, Value: p, Period: period} }

// RatesOf reads an HPA's scaling policies.
func RatesOf(policies []autoscalingv2.HPAScalingPolicy) []Rate {
	out := make([]Rate, 0, len(policies))
	for _, p := range policies {
		out = append(out, Rate{Percent: p.Type == autoscalingv2.PercentScalingPolicy, Value: int(p.Value), Period: time.Duration(p.PeriodSeconds) * time.Second})
	}
	return out
}

// DefaultBehavior is the HPA controller's default behavior.
func DefaultBehavior(minR, maxR int) Behavior {
	return Behavior{Up: []Rate{Percent(100, 15*time.Second), Pods(4, 15*time.Second)},
		DownWindow: 300 * time.Second, Down: []Rate{Percent(100, 15*time.Second)},
		MinReplicas: minR, MaxReplicas: maxR}
}

type recommendation struct {
	at time.Time
	n  int
}

type scaling struct {
	at    time.Time
	delta int
}

// hpa is one HorizontalPodAutoscaler's state between syncs.
type hpa struct {
	b       Behavior
	spec    int
	recs    []recommendation
	changes []scaling
}

// newHPA starts as the controller does: a new HPA's recommendations are
// seeded with its current replicas, so its first down window holds them.
func newHPA(b Behavior, replicas int) hpa {
	return hpa{b: b, spec: replicas, recs: []recommendation{{origin, replicas}}}
}

// decide turns a recommendation into the Deployment's replicas:
// clamped to the bounds, stabilized, then rate-limited.
func (h *hpa) decide(now time.Time, want int) int {
	want = min(max(want, h.b.MinReplicas), h.b.MaxReplicas)
	h.recs = append(h.recs, recommendation{now, want})
	keep := max(h.b.UpWindow, h.b.DownWindow)
	for len(h.recs) > 1 && now.Sub(h.recs[0].at) > keep {
		h.recs = h.recs[1:]
	}
	next := h.limit(now, h.stabilize(now, want))
	if next != h.spec {
		h.changes = append(h.changes, scaling{now, next - h.spec})
		h.spec = next
	}
	return h.spec
}

// stabilize scales up to the least recommendation within the up window
// and down to the most within the down window.
func (h *hpa) stabilize(now time.Time, want int) int {
	up, down := want, want
	for _, r := range h.recs {
		if now.Sub(r.at) <= h.b.UpWindow {
			up = min(up, r.n)
		}
		if now.Sub(r.at) <= h.b.DownWindow {
			down = max(down, r.n)
		}
	}
	switch {
	case up > h.spec:
		return up
	case down < h.spec:
		return down
	}
	return h.spec
}

// limit applies the rate policies as the controller does
// (calculateScaleUpLimitWithScalingRules and
// calculateScaleDownLimitWithBehaviors): each policy relative to the
// replicas at the start of its period, which undoes every change within
// it, up and down; a percent rounds up when scaling up and truncates when
// scaling down.
func (h *hpa) limit(now time.Time, desired int) int {
	if desired == h.spec {
		return desired
	}
	if desired > h.spec {
		most := math.MinInt
		for _, r := range h.b.Up {
			start := h.periodStart(now, r.Period)
			proposed := start + r.Value
			if r.Percent {
				proposed = int(math.Ceil(float64(start) * (1 + float64(r.Value)/100)))
			}
			most = max(most, proposed)
		}
		return min(desired, max(most, h.spec))
	}
	least := math.MaxInt
	for _, r := range h.b.Down {
		start := h.periodStart(now, r.Period)
		proposed := start - r.Value
		if r.Percent {
			proposed = int(float64(start) * (1 - float64(r.Value)/100))
		}
		least = min(least, proposed)
	}
	return max(desired, min(least, h.spec))
}

// periodStart is the replicas at the start of a period ending now.
func (h *hpa) periodStart(now time.Time, period time.Duration) int {
	start := h.spec
	for _, c := range h.changes {
		if now.Sub(c.at) < period {
			start -= c.delta
		}
	}
	return start
}
