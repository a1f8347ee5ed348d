package gather

import (
	"slices"
	"time"

	"github.com/gpuscale/gpuscale/pkg/scrape"
)

// A target that answered and then hangs looks healthy until it has held a
// worker for the whole scrape timeout: with 512 of them at the defaults
// (64 workers, 3 s), the healthy targets waited behind them for cycles,
// their samples 28.9 s old. So a healthy target is given as long as its own
// answers take, not the scraper's timeout: patienceFactor times the slowest
// of its recent successful scrapes, and never less than a tenth of the
// interval (nor 100 ms), which a healthy scrape waiting for a busy
// adapter's CPU may take. The workers then get through 640 hanging targets
// in a cycle (64 workers x 10), and healthy targets are scraped quickest
// first. A target that hangs, or is still in flight when the
// cycle ends, is suspect from then on: retried once after the healthy
// targets, with the full timeout (so a healthy target that missed its
// patience once is back at the next cycle), then, failing again, among
// the suspects, which the scraper scrapes last, a quarter of the workers
// at a time.
const (
	// patienceFactor bounds how much slower than its recent scrapes a
	// healthy target may answer: generous, since a loaded adapter or pod
	// slows every scrape, and a healthy target that misses it loses one
	// sample, not its place (its next scrape, as a suspect, brings it
	// back).
	patienceFactor = 10
	// minPatienceShare is the least patience as a fraction of the
	// interval, and minPatienceFloor the least in any case: the jitter of
	// a loaded adapter and pod.
	minPatienceShare = 10
	minPatienceFloor = 100 * time.Millisecond
	// typicalDecay is how much of the slowest recent duration a success
	// keeps: a slow scrape is remembered for a few dozen scrapes.
	typicalDecay = 15.0 / 16
)

// minPatience is the least time a healthy target is given.
func (g *Gatherer) minPatience() time.Duration {
	return max(g.cfg.Interval/minPatienceShare, minPatienceFloor)
}

// patience is the timeout for tt's next scrape: 0 (the scraper's own) for
// a target not known healthy.
func (g *Gatherer) patience(tt *target) time.Duration {
	typical := time.Duration(tt.typical.Load())
	if scrape.Health(tt.health.Load()) != scrape.HealthUp || typical <= 0 {
		return 0
	}
	return max(patienceFactor*typical, g.minPatience())
}

// answered records how long a successful scrape took.
func (tt *target) answered(d time.Duration) {
	prev := time.Duration(tt.typical.Load())
	tt.typical.Store(int64(max(d, time.Duration(float64(prev)*typicalDecay))))
	tt.failed.Store(0)
}

// lane is how the scraper is to schedule tt: by its health, except that a
// target that answered before and has failed once since is retried as an
// unknown one (after the healthy targets, before the suspects, with all
// the workers and the full timeout), so that one slow scrape of a healthy
// target costs it one sample, however many suspects there are.
func (tt *target) lane() scrape.Health {
	h := scrape.Health(tt.health.Load())
	if h == scrape.HealthDown && tt.failed.Load() == 1 && tt.lastSuccess.Load() != 0 {
		return scrape.HealthUnknown
	}
	return h
}

// heldAWorker reports whether a scrape the cycle's deadline ended had been
// in flight for a healthy target's least patience: one left unscraped, or
// started as the deadline came, says nothing about its target.
func (g *Gatherer) heldAWorker(r scrape.Result) bool { return r.Duration >= g.minPatience() }

// quickFirst orders targets by how long their scrapes take, quickest
// first, keeping the discovery order among equals (within a power of two
// of each other): the scraper takes each lane in the order given, so a
// healthy target is never queued behind slower ones, however many answer
// slowly.
func quickFirst(st []scrape.Target, byKey map[string]*target) {
	type ranked struct {
		rank int
		t    scrape.Target
	}
	rs := make([]ranked, len(st))
	for i, t := range st {
		r := 0
		for d := byKey[t.Key].typical.Load(); d > 0; d >>= 1 {
			r++
		}
		rs[i] = ranked{r, t}
	}
	slices.SortStableFunc(rs, func(a, b ranked) int { return a.rank - b.rank })
	for i, r := range rs {
		st[i] = r.t
	}
}
