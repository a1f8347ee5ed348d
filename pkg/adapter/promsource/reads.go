package promsource

import (
	"context"
	"sync"
	"time"

	"github.com/gpuscale/gpuscale/pkg/adapter/promsource/promapi"
)

// reads runs queries so that identical ones share one answer: a query
// asked while the same query is in flight waits for that one (the HPA
// controller's workers, KEDA's polls and a dashboard asking at once), and
// an answer is reused for reuseFor after it was asked. The server's data
// change once per scrape, so reusing an answer for a fraction of the
// scrape interval adds at most that fraction to a value's age, and saves
// the server a query per reader. A failed query is never reused: the next
// reader asks again.
type reads struct {
	reuseFor time.Duration
	now      func() time.Time

	mu sync.Mutex
	m  map[string]*read
	// swept is when expired answers were last dropped.
	swept time.Time
}

// read is one query's answer, shared by everyone who asked for it.
type read struct {
	done  chan struct{}
	asked time.Time
	vec   []promapi.Sample // read-only once done
	err   error
	// took is how long the server took to answer.
	took time.Duration
}

func newReads(reuseFor time.Duration, now func() time.Time) *reads {
	return &reads{reuseFor: reuseFor, now: now, m: map[string]*read{}}
}

// get returns q's answer: one in flight or asked within reuseFor, else a
// new one from fetch, which runs to its end (bounded by its own timeout)
// even if every caller gives up, so that those still waiting get it. ran
// reports whether this call started the query, and took is then the
// server's time for it.
func (r *reads) get(ctx context.Context, q string, fetch func(context.Context, time.Time) ([]promapi.Sample, error)) (vec []promapi.Sample, took time.Duration, ran bool, err error) {
	now := r.now()
	r.mu.Lock()
	e, ok := r.m[q]
	if !ok || !r.usable(e, now) {
		e = &read{done: make(chan struct{}), asked: now}
		r.m[q] = e
		ran = true
		r.sweepLocked(now)
	}
	r.mu.Unlock()
	if ran {
		go r.fetch(context.WithoutCancel(ctx), q, e, fetch)
	}
	select {
	case <-e.done:
		return e.vec, e.took, ran, e.err
	case <-ctx.Done():
		return nil, 0, ran, ctx.Err()
	}
}

func (r *reads) fetch(ctx context.Context, q string, e *read, fetch func(context.Context, time.Time) ([]promapi.Sample, error)) {
	start := time.Now()
	e.vec, e.err = fetch(ctx, e.asked)
	e.took = time.Since(start)
	close(e.done)
	if e.err != nil || r.reuseFor <= 0 {
		r.mu.Lock()
		if r.m[q] == e {
			delete(r.m, q)
		}
		r.mu.Unlock()
	}
}

// usable reports whether e may answer a query asked at now: it is in
// flight, or it succeeded within reuseFor.
func (r *reads) usable(e *read, now time.Time) bool {
	select {
	case <-e.done:
		return e.err == nil && now.Sub(e.asked) <= r.reuseFor
	default:
		return true
	}
}

// sweepLocked drops the answers past reuse, at most once per reuseFor, so
// an answer is held at most twice that long.
func (r *reads) sweepLocked(now time.Time) {
	if now.Sub(r.swept) < r.reuseFor {
		return
	}
	r.swept = now
	for q, e := range r.m {
		if !r.usable(e, now) {
			delete(r.m, q)
		}
	}
}

// held returns the number of answers held, for tests.
func (r *reads) held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}
