package capacity

import (
	"math"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// windowSlots is how many steps a window keeps at most (plus the one being
// filled). Every API call for the signal is an estimate, and anyone allowed
// to read the metric sets how often they come; so increases closer together
// than window/windowSlots (5 s of the default minute, the default scrape
// interval) are added into one step, and an estimate costs the same however
// often it is asked (BenchmarkEstimateCallRate).
const windowSlots = 12

// prefillWindow keeps a workload's prefill-time increases over the
// configured window. Servers export cumulative histograms; the estimator
// sees each pod's newest at every estimate and takes the increase from the
// one it saw before, so it needs no history from its source.
type prefillWindow struct {
	// last is each pod's histogram at the previous estimate, by UID.
	last map[string]*histogram.Histogram
	// steps are the increases between estimates, oldest first, each
	// over every pod that had a histogram at both ends; each covers at
	// most window/windowSlots from its start.
	steps []prefillStep
	// lastAt is the previous estimate's time.
	lastAt time.Time
	// arrivals is the index of dispersion across the replicas of the
	// requests each finished prefilling per step: what the router makes
	// of the arrivals' variability (arrivalSpread).
	arrivals arrivalSpread
}

// arrivalSpread smooths, over the window, the cross-replica mean and
// variance of the requests each replica took between two estimates (the
// increase of its prefill-time histogram's count). Their ratio is the
// index of dispersion of a replica's arrivals: about 1 when a router picks
// replicas at random, about 1/replicas for round-robin, above 1 for one
// that sends bursts to a replica. It is the arrivals' squared coefficient
// of variation the prefill queue sees (Kingman), measured, not assumed.
type arrivalSpread struct {
	mean, variance float64
	at             time.Time
}

func (a *arrivalSpread) observe(now time.Time, counts []float64, window time.Duration) {
	if len(counts) < 2 {
		return
	}
	m, v := meanVar(counts)
	if !(m > 0) {
		return
	}
	w := 1.0
	if !a.at.IsZero() {
		w = weight(max(now.Sub(a.at).Seconds(), 0), window)
	}
	a.mean += w * (m - a.mean)
	a.variance += w * (v - a.variance)
	a.at = now
}

// dispersion is the measured index, ok false before any.
func (a *arrivalSpread) dispersion() (float64, bool) {
	if a.at.IsZero() || !(a.mean > 0) {
		return 0, false
	}
	return min(a.variance/a.mean, maxDispersion), true
}

type prefillStep struct {
	from, to time.Time
	inc      *histogram.Histogram
	// podTime is the time the step covers times the pods its increase
	// is over: replica-seconds on the estimator's clock.
	podTime time.Duration
}

// observe records the increase since the previous estimate of every pod
// with a histogram (of gets: the prefill-time one, or ITL's), and drops
// what fell out of the window. A pod whose layout changed, or seen for the
// first time, starts over.
func (w *prefillWindow) observe(now time.Time, pods []Pod, window time.Duration, of func(Pod) *histogram.Histogram) {
	next := make(map[string]*histogram.Histogram, len(pods))
	var (
		parts  []*histogram.Histogram
		counts []float64
	)
	for _, p := range pods {
		h := of(p)
		if h == nil || p.UID == "" {
			continue
		}
		next[p.UID] = h
		if prev, ok := w.last[p.UID]; ok && !w.lastAt.IsZero() {
			// Validate leaves a histogram's sum alone (PromQL's quantiles
			// do not read it); the adapter's ingest refuses a non-finite
			// or negative one (signal.CheckTTFT), and a caller that did
			// not check gets the increase dropped here, since the prefill
			// term's busy time and the KV term's residence are sums.
			if inc, err := histogram.Increase(prev, h); err == nil && inc.Sum >= 0 && !math.IsInf(inc.Sum, 0) {
				parts = append(parts, inc)
				counts = append(counts, inc.Count)
			}
		}
	}
	if len(parts) > 0 && fewLayouts(parts) {
		if inc, err := histogram.Merge(parts...); err == nil {
			w.add(prefillStep{from: w.lastAt, to: now, inc: inc, podTime: time.Duration(len(parts)) * now.Sub(w.lastAt)}, window/windowSlots)
		}
	}
	w.arrivals.observe(now, counts, window)
	w.last, w.lastAt = next, now
	i := 0
	for i < len(w.steps) && now.Sub(w.steps[i].from) > window {
		i++
	}
	w.steps = w.steps[i:]
}

// maxLayouts bounds the bucket layouts one step merges. The pods of a
// workload or model share their server's layout, or two during a rollout
// that changed it; merging takes the union of the layouts' bounds, so pods
// that each chose their own would make a step of thousands of buckets,
// kept for the whole window and merged again on every read. A step of more
// is dropped: the prefill term rests on the steps left.
const maxLayouts = 4

// fewLayouts reports whether hs have at most maxLayouts bucket layouts.
func fewLayouts(hs []*histogram.Histogram) bool {
	var seen [maxLayouts]*histogram.Histogram
	n := 0
next:
	for _, h := range hs {
		for _, l := range seen[:n] {
			if histogram.SameBounds(l, h) {
				continue next
			}
		}
		if n == maxLayouts {
			return false
		}
		seen[n] = h
		n++
	}
	return true
}

// maxStepBuckets bounds the buckets of one step: maxLayouts layouts of up
// to 64 buckets (signal.MaxHistogramBuckets).
const maxStepBuckets = maxLayouts * 64

// add appends s, or adds it into the newest step when that began no more than
// slot before s ends. Should the two add up past maxStepBuckets, s is
// dropped, as a step of too many layouts is: layouts that change from one
// read to the next must not grow a step, nor the number of steps.
func (w *prefillWindow) add(s prefillStep, slot time.Duration) {
	if n := len(w.steps); n > 0 && s.to.Sub(w.steps[n-1].from) <= slot {
		if inc, err := histogram.Merge(w.steps[n-1].inc, s.inc); err == nil && len(inc.Bounds) <= maxStepBuckets {
			w.steps[n-1].inc, w.steps[n-1].to = inc, s.to
			w.steps[n-1].podTime += s.podTime
		}
		return
	}
	if len(s.inc.Bounds) <= maxStepBuckets {
		w.steps = append(w.steps, s)
	}
}

// podTime is the replica-seconds the window's increases are over.
func (w *prefillWindow) podTime() time.Duration {
	var d time.Duration
	for _, s := range w.steps {
		d += s.podTime
	}
	return d
}

// total is the window's merged increase and the time it covers.
func (w *prefillWindow) total() (*histogram.Histogram, time.Duration) {
	if len(w.steps) == 0 {
		return nil, 0
	}
	hs := make([]*histogram.Histogram, len(w.steps))
	for i, s := range w.steps {
		hs[i] = s.inc
	}
	h, err := histogram.Merge(hs...)
	if err != nil {
		return nil, 0
	}
	return h, w.steps[len(w.steps)-1].to.Sub(w.steps[0].from)
}

// prefillTerm fills est's prefill parts: the replicas' prefill work over
// the window, grown as the demand is forecast to grow, over what one
// replica's prefill carries within the objective. The growth is the
// forecast's over the smoothed level, not over today's demand: the window's
// work is a minute's mean, and a momentary dip in the requests in flight
// is no growth ahead.
//
// It also measures, from the same window, a request's residence in the
// batch (Little's law: the requests running over the rate at which they
// got their first token, running being the Ready replicas' total) and the
// slack a request of the window's mean prefill time has within the
// objective, both on the servers' clock, for the KV term.
func (e *Estimator) prefillTerm(st *workloadState, now time.Time, pods []Pod, running float64, est *Estimate, objective time.Duration) {
	st.prefill.observe(now, pods, e.cfg.Window, func(p Pod) *histogram.Histogram { return p.Prefill })
	inc, span := st.prefill.total()
	if inc == nil || span <= 0 {
		return
	}
	scale := e.cfg.TimeScale
	if scale <= 0 {
		scale = 1
	}
	est.PrefillBusy = inc.Sum / (span.Seconds() * scale)
	if inc.Count > 0 {
		est.Residence = running * span.Seconds() * scale / inc.Count
		est.Slack = max(0, objective.Seconds()-inc.Sum/inc.Count)
	}
	est.Dispersion = 1
	if d, ok := st.prefill.arrivals.dispersion(); ok {
		est.Dispersion = d
	}
	// By default the arrivals are taken as random (M/G/1), as the signal
	// has always taken them; MeasuredArrivals takes the measured
	// dispersion instead, either way: a router more even than random
	// did not hold its evenness on a ramp, and one burstier than random
	// cost the conversation hour a minute (docs/autoscaling.md,
	// "Robustness").
	d := 1.0
	if e.cfg.MeasuredArrivals {
		d = est.Dispersion
	}
	est.Prefill = MaxPrefillBusy(inc, objective.Seconds(), e.cfg.Quantile, d)
	if e.cfg.PrefillPool && !est.Prefill.Reachable && est.Prefill.Requests > 0 {
		est.Prefill = prefillPoolLimit(inc, objective.Seconds(), e.cfg.Quantile, d)
	}
	if (!est.Prefill.Reachable && !e.cfg.PrefillPool) || est.Prefill.MaxBusy <= 0 {
		return
	}
	// A replica holds a request for its whole stream, so none running or
	// waiting, and none expected, is an idle pool. A prefill pool holds
	// one only for its prefill, a fraction of a second: at 60% busy its
	// replicas are found empty at a scrape about half the time. Its
	// window's prefill work is its load, and the pool reads idle when
	// that work has left the window.
	if est.Forecast <= 0 && !e.cfg.PrefillPool {
		return
	}
	growth := 1.0
	if level := st.holt.Level(); level > 0 {
		growth = max(1, st.forecast(now, est.Horizon)/level)
	}
	est.PrefillBacklog = prefillBacklog(est.Demand-running, inc, est.Horizon.Seconds()*scale, objective.Seconds())
	est.PrefillNeeded = (est.PrefillBusy*growth + est.PrefillBacklog) / est.Prefill.MaxBusy
}

// prefillBacklog is the prefill work of the requests waiting now, in
// replicas' worth: waiting requests of the window's mean prefill time,
// spread over the horizon (at least the objective). The window's finished
// prefills measure the work the replicas did, which stops growing once they
// are saturated, however fast the queue grows: without the queue's own
// work a replica with hundreds of requests waiting reads as barely busy.
// Capacity asked for now serves from a horizon on, so that is the time
// the backlog is given; a horizon unknown (0) gives it the objective.
func prefillBacklog(waiting float64, inc *histogram.Histogram, horizon, objective float64) float64 {
	if !(waiting > 0) || !(inc.Count > 0) || !(inc.Sum > 0) {
		return 0
	}
	return waiting * (inc.Sum / inc.Count) / max(horizon, objective)
}
