package scrape

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// Health is what the caller knows of a target from earlier cycles; Cycle
// schedules by it.
type Health uint8

const (
	// HealthUnknown: never scraped, or never since it was last left
	// unscraped at a cycle's deadline.
	HealthUnknown Health = iota
	// HealthUp: the last scrape succeeded.
	HealthUp
	// HealthDown: the last scrape failed; the target is suspect.
	HealthDown
)

// Target is one endpoint to scrape.
type Target struct {
	// Key is the caller's identity for the target, e.g. "namespace/pod".
	Key string
	// URL is the full endpoint URL, http(s)://ip:port/path.
	URL string
	// Families limits what is parsed of the target's exposition; nil
	// parses all of it.
	Families *Families
	// Health orders the target in a Cycle.
	Health Health
	// Authorization, when set, is sent as the request's Authorization
	// header: the exporters' reserved-lane token, sent to them alone.
	Authorization string
	// Timeout, when positive and shorter than Config.Timeout, is this
	// target's deadline instead: the caller's patience with a target whose
	// scrapes it knows to be quick.
	Timeout time.Duration
}

// Result is the outcome of scraping one Target.
type Result struct {
	Target   Target
	Families map[string]*dto.MetricFamily // nil when Err is set
	// Time is when the scrape started; use it as the sample timestamp.
	Time     time.Time
	Duration time.Duration
	// Err is nil on success; Reason(Err) classifies it.
	Err error
}

// Cycle scrapes every target, at most Config.Workers at a time, and calls sink
// exactly once per target as its result becomes available. sink is called
// from several goroutines at once and must be safe for concurrent use; a slow
// sink holds up its worker, so it should hand results off rather than do
// heavy work. The families of a result are counted against the in-flight
// budget until sink returns, and the worker parses its next scrape into
// the same memory: sink must not keep them, nor anything they point to
// (their strings are safe to keep).
//
// Each scrape has its own Config.Timeout, so a slow or broken target delays
// nothing but its own result. So that broken targets cannot delay the
// others' either, targets are scraped healthy first, then unknown ones, then
// suspect ones (HealthDown) in random order, of which no more than
// Config.SuspectWorkers are scraped at once: however many targets never
// answer, the healthy ones are all started as soon as there are workers
// for them. The cycle ends at Config.CycleTimeout (or ctx's deadline): scrapes
// in flight are aborted and targets not yet started reported at once, with
// ReasonCycleDeadline. When ctx is cancelled they are, with a "canceled" Err.
// Cycle returns once sink has been called for every target.
func (s *Scraper) Cycle(ctx context.Context, targets []Target, sink func(Result)) {
	if s.cfg.CycleTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.CycleTimeout)
		defer cancel()
	}
	var (
		order    = schedule(targets)
		next     atomic.Int64 // index in order of the next target to claim
		suspects = make(chan struct{}, s.cfg.SuspectWorkers)
		wg       sync.WaitGroup
	)
	workers := min(s.cfg.Workers, len(targets))
	for range workers {
		wg.Go(func() {
			l := s.budget.lease(s.budget.share)
			a, x := newArena(), newExchange()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(order)) {
					return
				}
				t := targets[order[i]]
				slot := false
				if t.Health == HealthDown {
					select {
					case suspects <- struct{}{}:
						slot = true
					case <-ctx.Done():
						// Reported at once below, without a slot.
					}
				}
				sink(s.scrapeTarget(ctx, t, l, a, x))
				l.release()
				a.reset()
				if slot {
					<-suspects
				}
			}
		})
	}
	wg.Wait()
}

// schedule returns the order in which to scrape targets: healthy, unknown,
// then suspect ones shuffled, so that those a cycle's deadline leaves out
// are not the same every time.
func schedule(targets []Target) []int {
	order := make([]int, 0, len(targets))
	for _, h := range []Health{HealthUp, HealthUnknown} {
		for i, t := range targets {
			if t.Health == h {
				order = append(order, i)
			}
		}
	}
	down := len(order)
	for i, t := range targets {
		if t.Health != HealthUp && t.Health != HealthUnknown {
			order = append(order, i)
		}
	}
	rest := order[down:]
	rand.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	return order
}

func (s *Scraper) scrapeTarget(ctx context.Context, t Target, l *lease, a *arena, x *exchange) Result {
	start := s.cfg.Clock.Now()
	fams, err := s.scrape(ctx, t.URL, t.Families, l, a, x, t.Authorization, t.Timeout)
	return Result{Target: t, Families: fams, Time: start, Duration: s.cfg.Clock.Since(start), Err: err}
}
