package scrape

import (
	"context"
	"math/rand/v2"
	"sync"
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
// others' either, targets are taken from three lanes. Healthy ones come
// first, in the order given. Unknown ones (new, or being retried) are
// taken beside them, but no more than Config.SuspectWorkers at once, so
// that a new pod gets its first scrape and a pod with one failure its
// retry even when the healthy targets fill the cycle; once the healthy
// lane is empty they have every worker. Suspect ones (HealthDown) come
// last, in random order, no more than Config.SuspectWorkers at once:
// however many targets never answer, the healthy ones are all started as
// soon as there are workers for them. The cycle ends at
// Config.CycleTimeout (or ctx's deadline): scrapes in flight are aborted
// and targets not yet started reported at once, with ReasonCycleDeadline.
// When ctx is cancelled they are, with a "canceled" Err. Cycle returns
// once sink has been called for every target.
func (s *Scraper) Cycle(ctx context.Context, targets []Target, sink func(Result)) {
	if s.cfg.CycleTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.CycleTimeout)
		defer cancel()
	}
	q := newLanes(targets, s.cfg.SuspectWorkers)
	var wg sync.WaitGroup
	for range min(s.cfg.Workers, len(targets)) {
		wg.Go(func() {
			l := s.budget.lease(s.budget.share)
			a, x := newArena(), newExchange()
			for {
				i, release, ok := q.next(ctx)
				if !ok {
					return
				}
				sink(s.scrapeTarget(ctx, targets[i], l, a, x))
				l.release()
				a.reset()
				release()
			}
		})
	}
	wg.Wait()
}

// lanes hands out a cycle's targets, each once, lane by lane (see Cycle).
type lanes struct {
	mu                sync.Mutex
	up, unknown, down []int // indices into the targets, in order
	// unknownSlots and suspectSlots bound the unknown and suspect
	// targets in flight.
	unknownSlots, suspectSlots chan struct{}
}

func newLanes(targets []Target, slots int) *lanes {
	q := &lanes{unknownSlots: make(chan struct{}, slots), suspectSlots: make(chan struct{}, slots)}
	for i, t := range targets {
		switch t.Health {
		case HealthUp:
			q.up = append(q.up, i)
		case HealthUnknown:
			q.unknown = append(q.unknown, i)
		default:
			q.down = append(q.down, i)
		}
	}
	// Shuffled, so that those a cycle's deadline leaves out are not the
	// same every time.
	rand.Shuffle(len(q.down), func(i, j int) { q.down[i], q.down[j] = q.down[j], q.down[i] })
	return q
}

// next claims the next target to scrape, and returns the function that
// frees its slot once it is scraped; false when none are left. A worker
// waiting for a suspect slot is released by ctx's end, and then reports
// the target at once (Cycle's deadline).
func (q *lanes) next(ctx context.Context) (int, func(), bool) {
	q.mu.Lock()
	if len(q.unknown) > 0 {
		if len(q.up) == 0 { // the healthy lane is done: every worker may help
			i := pop(&q.unknown)
			q.mu.Unlock()
			return i, func() {}, true
		}
		select {
		case q.unknownSlots <- struct{}{}:
			i := pop(&q.unknown)
			q.mu.Unlock()
			return i, func() { <-q.unknownSlots }, true
		default:
		}
	}
	if len(q.up) > 0 {
		i := pop(&q.up)
		q.mu.Unlock()
		return i, func() {}, true
	}
	if len(q.down) == 0 {
		q.mu.Unlock()
		return 0, nil, false
	}
	i := pop(&q.down)
	q.mu.Unlock()
	select {
	case q.suspectSlots <- struct{}{}:
		return i, func() { <-q.suspectSlots }, true
	case <-ctx.Done():
		return i, func() {}, true // reported at once, without a slot
	}
}

func (s *Scraper) scrapeTarget(ctx context.Context, t Target, l *lease, a *arena, x *exchange) Result {
	start := s.cfg.Clock.Now()
	fams, err := s.scrape(ctx, t.URL, t.Families, l, a, x, t.Authorization, t.Timeout)
	return Result{Target: t, Families: fams, Time: start, Duration: s.cfg.Clock.Since(start), Err: err}
}

// pop takes the first index off a lane.
func pop(lane *[]int) int {
	i := (*lane)[0]
	*lane = (*lane)[1:]
	return i
}
