package promsource

import (
	"sync"
	"time"
)

// A per-pod read can ask the server in two ways:
//
//   - by name: {namespace="ns", pod=~"a|b|..."}, split into queries of at
//     most MaxQueryBytes. The server parses the query, compiles and
//     matches the regex and evaluates the asked pods' series: its work
//     grows with the names asked.
//   - wide: {namespace="ns", pod=~".*"}, one query for the whole
//     namespace, of which the adapter keeps the asked pods. The server
//     evaluates, encodes and the adapter decodes every pod of the
//     namespace: the work grows with the namespace's size.
//
// Which costs less depends on the backend, the query and how much of the
// namespace a read asks about, so the planner does not guess a threshold:
// it measures, per metric, the server's seconds per name of the reads by
// name and per series of the wide reads, as the adapter's own reads run,
// and gives each read the way whose predicted cost is smaller:
//
//	wide  when  series(namespace) * secondsPerSeries  <  demand * secondsPerName
//
// series(namespace) is what the last wide read of that namespace and
// metric returned, or the namespace's pod count before there was one.
// demand is the names asked about that namespace and metric over one
// reuse period (reads.reuseFor), this read's included: a wide answer is
// reused by every read of the namespace in that period (each HPA of a
// namespace asks about its own pods, and one wide answer serves them all),
// while each read by name is a query of its own.
//
// Until a way has been measured for a metric, its cost per unit is a
// prior: the figures issue 28's text measured with Prometheus 2.42 at
// 10,000 pods (priorPerName). A way not taken for a while is tried again when
// the two predictions are within a factor of two, so that the estimates
// follow the server as it changes.
type planner struct {
	now      func() time.Time
	reuseFor time.Duration
	// podsIn counts a namespace's pods; nil or 0: unknown.
	podsIn func(namespace string) int

	mu    sync.Mutex
	costs map[string]*unitCosts // by metric
	wide  map[string]*demand    // by wide query
}

// Priors, in seconds per unit: in the measurement of issue 28's text,
// Prometheus 2.42 on a 2-vCPU machine took 680 ms for 10,000 pods asked by
// name (8 queries) and 146 ms for the same 10,000 asked wide. They are
// not docs/performance.md's: its "PromQL source beside prometheus-adapter"
// section times the wide gpu_utilization query alone at 63 ms (80 ms of
// CPU), and a measured cost replaces a prior after the first read.
const (
	priorPerName   = 68e-6
	priorPerSeries = 14.6e-6
)

// unitCosts are a metric's measured costs per unit of each way.
type unitCosts struct {
	perName, perSeries ratio
}

// ratio estimates seconds per unit as a decaying sum of seconds over a
// decaying sum of units: reads of many units weigh more, as they should,
// being the reads whose way matters; each new read keeps 80% of the weight
// of those before it, so the estimate follows the last few reads.
type ratio struct {
	secs, units float64
	// last is when a read last fed it; zero: never.
	last time.Time
}

func (r *ratio) add(at time.Time, secs float64, units int) {
	const keep = 0.8
	r.secs = r.secs*keep + secs
	r.units = r.units*keep + float64(units)
	r.last = at
}

func (r *ratio) perUnit(prior float64) float64 {
	if r.units <= 0 {
		return prior
	}
	return r.secs / r.units
}

// demand counts the names asked of one namespace and metric per reuse
// period, and the series its wide read returned.
type demand struct {
	series int
	// asked are the names asked in the period that began at since;
	// before, in the period before it.
	asked, before int
	since         time.Time
}

// revisit is how long a way may go unmeasured before a close call tries
// it again.
const revisit = 10 * time.Minute

func newPlanner(now func() time.Time, reuseFor time.Duration, podsIn func(string) int) *planner {
	return &planner{now: now, reuseFor: reuseFor, podsIn: podsIn, costs: map[string]*unitCosts{}, wide: map[string]*demand{}}
}

// wideRead decides a read of names pods of namespace for metric, whose
// wide query is wideQ, and counts its names towards that query's demand.
func (p *planner) wideRead(namespace, metric, wideQ string, names int) bool {
	if namespace == "" || names == 0 {
		return false
	}
	size := 0
	if p.podsIn != nil {
		size = p.podsIn(namespace)
	}
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.wide[wideQ]
	if d == nil {
		p.pruneLocked(now)
		d = &demand{since: now}
		p.wide[wideQ] = d
	}
	if p.reuseFor > 0 && now.Sub(d.since) >= p.reuseFor {
		if now.Sub(d.since) < 2*p.reuseFor {
			d.before = d.asked
		} else {
			d.before = 0
		}
		d.asked, d.since = 0, now
	}
	if p.reuseFor <= 0 {
		d.since = now
	}
	d.asked += names
	series := d.series
	if series == 0 {
		series = size
	}
	if series == 0 {
		return false // nothing known of the namespace: ask by name
	}
	want := names
	if p.reuseFor > 0 {
		want = max(names, d.asked, d.before)
	}
	c := p.costsLocked(metric)
	wideCost := float64(series) * c.perSeries.perUnit(priorPerSeries)
	nameCost := float64(want) * c.perName.perUnit(priorPerName)
	wide := wideCost < nameCost
	// A close call tries the way whose estimate is older, if it has not
	// been measured lately.
	if lo, hi := min(wideCost, nameCost), max(wideCost, nameCost); hi < 2*lo {
		other := &c.perName
		if !wide {
			other = &c.perSeries
		}
		if now.Sub(other.last) > revisit {
			return !wide
		}
	}
	return wide
}

// byName records a read of names pods by name whose queries took took in
// all.
func (p *planner) byName(metric string, names int, took time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.costsLocked(metric).perName.add(p.now(), took.Seconds(), names)
}

// wideDone records a wide read that returned series and took took.
func (p *planner) wideDone(metric, wideQ string, series int, took time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d := p.wide[wideQ]; d != nil {
		d.series = series
	}
	if series > 0 {
		p.costsLocked(metric).perSeries.add(p.now(), took.Seconds(), series)
	}
}

// maxDemands bounds the wide queries whose demand is counted (namespaces
// times metrics times metric selectors); past it, those not asked for
// within revisit are forgotten.
const maxDemands = 4096

func (p *planner) pruneLocked(now time.Time) {
	if len(p.wide) < maxDemands {
		return
	}
	for q, d := range p.wide {
		if now.Sub(d.since) > revisit {
			delete(p.wide, q)
		}
	}
}

func (p *planner) costsLocked(metric string) *unitCosts {
	c := p.costs[metric]
	if c == nil {
		c = &unitCosts{}
		p.costs[metric] = c
	}
	return c
}
