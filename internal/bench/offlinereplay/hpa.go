package offlinereplay

import (
	"math"
	"time"
)

// Behavior is an HPA's scaling behavior (autoscaling/v2), as the HPA
// controller applies it.
type Behavior struct {
	// UpWindow and DownWindow are the stabilization windows.
	UpWindow, DownWindow time.Duration
	// Scale-up may add the larger of UpPercent and UpPods per UpPeriod.
	UpPercent, UpPods int
	UpPeriod          time.Duration
	// Scale-down may remove the larger of DownPods and DownPercent per
	// DownPeriod (selectPolicy Max, the controller's default).
	DownPods, DownPercent int
	DownPeriod            time.Duration
	MinReplicas           int
	MaxReplicas           int
}

// DefaultBehavior is the HPA controller's default behavior.
func DefaultBehavior(minR, maxR int) Behavior {
	return Behavior{UpPercent: 100, UpPods: 4, UpPeriod: 15 * time.Second,
		DownWindow: 300 * time.Second, DownPercent: 100, DownPeriod: 15 * time.Second,
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

// limit applies the rate policies, each relative to the replicas at the
// start of its period.
func (h *hpa) limit(now time.Time, desired int) int {
	if desired == h.spec {
		return desired
	}
	up := desired > h.spec
	start := h.spec
	for _, c := range h.changes {
		if up && c.delta > 0 && now.Sub(c.at) < h.b.UpPeriod || !up && c.delta < 0 && now.Sub(c.at) < h.b.DownPeriod {
			start -= c.delta
		}
	}
	if up {
		most := max(start+h.b.UpPods, int(math.Ceil(float64(start)*(1+float64(h.b.UpPercent)/100))))
		return min(desired, max(most, h.spec))
	}
	least := start
	if h.b.DownPods > 0 {
		least = start - h.b.DownPods
	}
	if h.b.DownPercent > 0 {
		least = min(least, int(math.Ceil(float64(start)*(1-float64(h.b.DownPercent)/100))))
	}
	return max(desired, min(least, h.spec))
}
