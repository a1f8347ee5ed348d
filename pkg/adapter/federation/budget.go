package federation

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// MaxInflightAnswerBytes bounds the bytes of the backend's answers that
// all forwarded requests hold at once, read or being decoded. Decoding an
// answer into the metrics API's types takes about five times its bytes
// (the body, the versioned objects, the internal ones), so this bounds the
// memory forwarding takes at about 100 MiB, whatever the backend answers
// and however many HPAs ask at once: eight concurrent 25 MiB answers once
// took the heap to 1,167 MiB. A metric list for 10,000 pods is about 2 MB,
// so eight such lists decode at once; larger answers wait their turn, up
// to the forward timeout.
const MaxInflightAnswerBytes = 16 << 20

// budgetChunk is how much of the budget a request takes at a time while
// it reads an answer of unknown length.
const budgetChunk = 64 << 10

// answerBudget is the weighted semaphore of MaxInflightAnswerBytes.
type answerBudget struct {
	sem   *semaphore.Weighted
	total int64
	// held is what the leases hold now and peak the most they held at
	// once: the budget's own account, for tests and the gauge.
	held, peak atomic.Int64
}

func newAnswerBudget(total int64) *answerBudget {
	return &answerBudget{sem: semaphore.NewWeighted(total), total: total}
}

func (b *answerBudget) add(n int64) {
	h := b.held.Add(n)
	for {
		p := b.peak.Load()
		if h <= p || b.peak.CompareAndSwap(p, h) {
			return
		}
	}
}

// lease is one forwarded request's share of the budget, from the first
// byte of its answer until its decoded objects are handed over.
type lease struct {
	b   *answerBudget
	ctx context.Context
	mu  sync.Mutex
	// held is what the lease holds; full is set once it holds what any
	// answer may need (the smaller of the budget and MaxResponseBytes).
	held int64
	full bool
}

type leaseKey struct{}

// withLease starts a lease for the request that ctx carries.
func (b *answerBudget) withLease(ctx context.Context) (context.Context, *lease) {
	l := &lease{b: b, ctx: ctx}
	return context.WithValue(ctx, leaseKey{}, l), l
}

func leaseFrom(ctx context.Context) *lease {
	l, _ := ctx.Value(leaseKey{}).(*lease)
	return l
}

// need makes the lease hold at least n bytes. It first tries to take the
// difference at once; failing that, it gives back everything and waits for
// the most any answer may need, so that no request ever waits while it
// holds a part of the budget, and requests cannot deadlock each other.
// What it has read while waiting is not counted then, so the answers in
// memory exceed the budget by at most the budget again.
func (l *lease) need(n int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.full || n <= l.held {
		return nil
	}
	grow := max(n-l.held, min(budgetChunk, l.b.total-l.held))
	if l.held+grow <= l.b.total && l.b.sem.TryAcquire(grow) {
		l.held += grow
		l.b.add(grow)
		return nil
	}
	l.releaseLocked()
	all := min(l.b.total, MaxResponseBytes)
	if err := l.b.sem.Acquire(l.ctx, all); err != nil {
		return fmt.Errorf("waiting for %d bytes of the answers' budget: %w", all, err)
	}
	l.held, l.full = all, true
	l.b.add(all)
	return nil
}

// release gives the lease's bytes back; the lease may be used again.
func (l *lease) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseLocked()
}

func (l *lease) releaseLocked() {
	if l.held > 0 {
		l.b.sem.Release(l.held)
		l.b.add(-l.held)
	}
	l.held, l.full = 0, false
}

// budgetRoundTripper charges the answer of a request that carries a lease
// to it: its declared length before the body is read, or the bytes as
// they are read.
type budgetRoundTripper struct{ next http.RoundTripper }

func (rt *budgetRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rt.next.RoundTrip(req)
	l := leaseFrom(req.Context())
	if err != nil || resp.Body == nil || l == nil {
		return resp, err
	}
	if resp.ContentLength > 0 {
		if err := l.need(resp.ContentLength); err != nil {
			resp.Body.Close()
			return nil, err
		}
	}
	resp.Body = &chargedBody{ReadCloser: resp.Body, l: l}
	return resp, nil
}

func (rt *budgetRoundTripper) WrappedRoundTripper() http.RoundTripper { return rt.next }

// chargedBody charges each read to its lease before making it.
type chargedBody struct {
	io.ReadCloser
	l *lease
	n int64
}

func (b *chargedBody) Read(p []byte) (int, error) {
	if err := b.l.need(b.n + int64(len(p))); err != nil {
		return 0, err
	}
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}
