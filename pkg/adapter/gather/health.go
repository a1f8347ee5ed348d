package gather

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpuscale/gpuscale/pkg/adapter/scrape"
)

// A target that answered and then hangs looks healthy until it has held a
// worker for the whole scrape timeout: with 512 of them at the defaults
// (64 workers, 3 s), the healthy targets waited behind them for cycles,
// their samples 28.9 s old. So:
//
//   - a healthy target is given as long as its own answers take, not the
//     scraper's timeout: patienceFactor times the slowest of its recent
//     successful scrapes, and never less than a tenth of the interval (nor
//     100 ms), which a healthy scrape waiting for a busy adapter's CPU may
//     take. The workers get through 640 hanging targets in a cycle (64
//     workers x 10);
//   - within each lane, targets with the longest record of answers go
//     first, then the quickest, so a pod that has answered for hours is not
//     queued behind ones that answered once;
//   - a target that hangs, or is still in flight when the cycle ends, is
//     suspect from then on. One that answered before is retried twice as
//     an unknown one, which the scraper takes beside the healthy targets
//     with a quarter of the workers at most, fewest failures and longest
//     record first, with retryPatience times its patience, so that a
//     healthy pod that missed its patience (a busy adapter, a garbage
//     collection) is back at the next cycle even when the healthy targets
//     fill it; failing a third time, it is among the suspects, which the
//     scraper scrapes last, a quarter of the workers at a time, in random
//     order, with the full timeout;
//   - when the workers cannot take every target in an interval, those the
//     deadline left out go first in the next cycle (order).
const (
	// patienceFactor bounds how much slower than its recent scrapes a
	// healthy target may answer: generous, since a loaded adapter or pod
	// slows every scrape, and a healthy target that misses it loses one
	// sample, not its place.
	patienceFactor = 10
	// minPatienceShare is the least patience as a fraction of the
	// interval, and minPatienceFloor the least in any case: the jitter of
	// a loaded adapter and pod.
	minPatienceShare = 10
	minPatienceFloor = 100 * time.Millisecond
	// typicalDecay is how much of the slowest recent duration a success
	// keeps: a slow scrape is remembered for a few dozen scrapes.
	typicalDecay = 15.0 / 16
	// retriedFailures is how many failures in a row a target that answered
	// before is retried early for, and retryPatience how much more patience
	// it then gets.
	retriedFailures = 2
	retryPatience   = 4
	// maxAnswers is where a target's record stops counting.
	maxAnswers = 1 << 20
)

// minPatience is the least time a healthy target is given.
func (g *Gatherer) minPatience() time.Duration {
	return max(g.cfg.Interval/minPatienceShare, minPatienceFloor)
}

// patience is the timeout for tt's next scrape: 0 (the scraper's own) for
// a target that never answered, or among the suspects.
func (g *Gatherer) patience(tt *target) time.Duration {
	typical := time.Duration(tt.typical.Load())
	if typical <= 0 {
		return 0
	}
	p := max(patienceFactor*typical, g.minPatience())
	switch {
	case scrape.Health(tt.health.Load()) == scrape.HealthUp:
		return p
	case tt.lane() == scrape.HealthUnknown:
		return retryPatience * p
	}
	return 0
}

// answered records how long a successful scrape took.
func (tt *target) answered(d time.Duration) {
	prev := time.Duration(tt.typical.Load())
	tt.typical.Store(int64(max(d, time.Duration(float64(prev)*typicalDecay))))
	tt.failed.Store(0)
	if tt.answers.Load() < maxAnswers {
		tt.answers.Add(1)
	}
}

// lane is how the scraper is to schedule tt: by its health, except that a
// target that answered before and has failed at most retriedFailures times
// since is retried as an unknown one (after the healthy targets, before the
// suspects, with all the workers and the full timeout).
func (tt *target) lane() scrape.Health {
	h := scrape.Health(tt.health.Load())
	if h == scrape.HealthDown && tt.answers.Load() > 0 && tt.failed.Load() <= retriedFailures {
		return scrape.HealthUnknown
	}
	return h
}

// heldAWorker reports whether a scrape the cycle's deadline ended had been
// in flight for a healthy target's least patience: one left unscraped, or
// started as the deadline came, says nothing about its target.
func (g *Gatherer) heldAWorker(r scrape.Result) bool { return r.Duration >= g.minPatience() }

// order sorts targets as the scraper is to take each lane: fewest
// failures in a row first; then those with no success since the previous
// cycle started (lastStart), which its deadline left out, oldest sample
// first; then the longest
// record of answers (by powers of two), then quick ones (under a tenth,
// then under all of the least patience, then the rest); then the one whose
// newest sample is oldest. The left-out ones come first because with more
// targets than the workers can take in an interval, the record and
// speed would otherwise leave out the same targets cycle after cycle
// while the others' records grow; a hanging target can jump the queue so
// only once, since its first hang makes it a failure.
func (g *Gatherer) order(st []scrape.Target, byKey map[string]*target, lastStart time.Time) {
	type ranked struct {
		failed, record, speed int
		leftOut               bool  // no success since lastStart
		last                  int64 // lastSuccess
		t                     scrape.Target
	}
	least := g.minPatience()
	rs := make([]ranked, len(st))
	for i, t := range st {
		tt := byKey[t.Key]
		last := tt.lastSuccess.Load()
		r := ranked{failed: int(tt.failed.Load()), last: last, leftOut: last != 0 && !lastStart.IsZero() && last < lastStart.UnixNano(), t: t}
		switch typical := time.Duration(tt.typical.Load()); {
		case typical >= least:
			r.speed = 2
		case typical >= least/10:
			r.speed = 1
		}
		for a := tt.answers.Load(); a > 0; a >>= 1 {
			r.record--
		}
		rs[i] = r
	}
	slices.SortStableFunc(rs, func(a, b ranked) int {
		if a.failed != b.failed {
			return a.failed - b.failed
		}
		switch {
		case a.leftOut && b.leftOut:
			return cmp.Compare(a.last, b.last)
		case a.leftOut:
			return -1
		case b.leftOut:
			return 1
		}
		if a.record != b.record {
			return a.record - b.record
		}
		if a.speed != b.speed {
			return a.speed - b.speed
		}
		return cmp.Compare(a.last, b.last)
	})
	for i, r := range rs {
		st[i] = r.t
	}
}
