package store

import (
	"math"
	"sync"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// QuantileMemo keeps, for each name of a Lookup, one latency quantile of
// the pod's window increase with the two samples it came from. A list
// that finds a pod's window ends unchanged since the last list of the same
// pods reuses the quantile instead of unpacking the two histograms again:
// at 10,000 pods those are cold reads, most of a TTFT list's CPU. Readers
// that list the same pods within a scrape interval (an HPA and KEDA on one
// Deployment, dashboards, kubectl) share the work; the first list after a
// pod's scrape works its quantile out as before.
//
// The reuse is exact up to float rounding. The extrapolation to the
// window's edges is the only part of the answer that moves with the
// evaluation time between scrapes, and where no bucket stops at its zero
// point (histogram.ZeroReach against histogram.StartReach, checked at each
// list) it scales every bucket by one factor, which a quantile does not
// see. A pod where it does not (a server started inside the window) is
// worked out again at every list.
type QuantileMemo struct {
	mu     sync.Mutex
	hist   signal.Hist
	q      float64
	window time.Duration
	slots  []quantileSlot
}

// quantileSlot is one name's memo.
type quantileSlot struct {
	// firstT and lastT are the window ends' sample times (Unix
	// nanoseconds; lastT 0: empty), firstSeq and lastSeq their places
	// among the window's histograms of the kind.
	firstT, lastT     int64
	firstSeq, lastSeq uint32
	// prevT is the time of the window's sample before the first
	// (math.MinInt64 when there is none): while the window's start stays
	// in [prevT, firstT) and the newest sample is the last, the ends are
	// the same, which answer checks without reading the window.
	prevT int64
	// n is the number of histograms from the first to the last.
	n int32
	// value is the quantile of the increase between the two, before
	// extrapolation (NaN when nothing was observed).
	value float64
	// none is set when the two have no increase: the bucket layout
	// changed between them.
	none bool
	// zeroReach is histogram.ZeroReach of that increase.
	zeroReach float64
}

// maxQuantileMemos bounds a Lookup's memos: the served quantiles (p50,
// p90 and p99 of TTFT and of ITL) need six.
const maxQuantileMemos = 8

// lookupMemos are a Lookup's QuantileMemos.
type lookupMemos struct {
	mu   sync.Mutex
	list []*QuantileMemo
}

// Quantiles returns l's memo of quantile q of histogram kind h over
// window, made on first use; nil past maxQuantileMemos (lists then work
// every quantile out).
func (l *Lookup) Quantiles(h signal.Hist, q float64, window time.Duration) *QuantileMemo {
	l.memos.mu.Lock()
	defer l.memos.mu.Unlock()
	for _, m := range l.memos.list {
		if m.hist == h && m.q == q && m.window == window {
			return m
		}
	}
	if len(l.memos.list) >= maxQuantileMemos {
		return nil
	}
	m := &QuantileMemo{hist: h, q: q, window: window, slots: make([]quantileSlot, len(l.names))}
	l.memos.list = append(l.memos.list, m)
	return m
}

// TryAcquire takes m for one list, which may split its names among
// goroutines (each writes only its own names' slots). It reports false
// when another list holds m; that list's caller then lists without a memo
// rather than wait. A nil m is never acquired.
func (m *QuantileMemo) TryAcquire() bool { return m != nil && m.mu.TryLock() }

// Release gives m back after a list that acquired it.
func (m *QuantileMemo) Release() { m.mu.Unlock() }

// HistQuantileHits is the first half of the Pods-metric list of a latency
// quantile: it calls fn(i, newest, v) for every name i of l whose slot in
// memo answers without reading the pod's window (quantileSlot.answer), and
// returns the names it could not answer, in order, for HistQuantileEachOf.
// Reading only each pod's newest sample and slot, it is cheap enough to
// run on the caller's goroutine, so that a list the memo answers does not
// wait for other cores; only the misses, which read two histograms each,
// are worth splitting. With no usable memo it answers none. v is
// histogram_quantile(q) of the pod's window increase, NaN where nothing was
// observed, which fn drops; fn must not keep newest (the pod's newest
// inference sample). memo, when not nil, must be acquired by the caller.
func (s *Store) HistQuantileHits(l *Lookup, h signal.Hist, q float64, memo *QuantileMemo, now time.Time, win, maxAge time.Duration, fn func(i int, newest *Sample, v float64)) []int32 {
	if h >= signal.NumHists || !s.demand.read(l.namespace, h, now, win) {
		return nil
	}
	slots := memo.slotsFor(l, h, q, win)
	s.mu.RLock()
	defer s.mu.RUnlock()
	ns := s.pods[l.namespace]
	if ns == nil {
		return nil
	}
	places := l.slots(ns)
	misses := make([]int32, 0, len(places))
	for i, j := range places {
		if j < 0 {
			continue
		}
		if slots != nil {
			newest := &ns.latest[signal.SourceInference][j]
			if v, ok, hit := slots[i].answer(newest, now, win, maxAge); hit {
				if ok {
					fn(i, newest, v)
				}
				continue
			}
		}
		misses = append(misses, int32(i))
	}
	return misses
}

// HistQuantileEachOf is the second half of the list (HistQuantileHits):
// it calls fn(i, newest, v) for every name i in names that has an increase
// of histogram kind h over the window (where HistIncrease has one),
// reading the pod's window and updating its slot in memo. A long list of
// misses may be split among goroutines, each with its own share of names
// and its own fn; memo is then written by all of them, each in its own
// names' slots only, under the one acquisition of the caller.
func (s *Store) HistQuantileEachOf(l *Lookup, h signal.Hist, q float64, memo *QuantileMemo, names []int32, now time.Time, win, maxAge time.Duration, fn func(i int, newest *Sample, v float64)) {
	if h >= signal.NumHists || !s.demand.read(l.namespace, h, now, win) {
		return
	}
	slots := memo.slotsFor(l, h, q, win)
	s.mu.RLock()
	defer s.mu.RUnlock()
	ns := s.pods[l.namespace]
	if ns == nil {
		return
	}
	var scratch histScratch
	places := l.slots(ns)
	for _, i := range names {
		if i < 0 || int(i) >= len(places) || places[i] < 0 {
			continue
		}
		j := places[i]
		var slot *quantileSlot
		if slots != nil {
			slot = &slots[i]
		}
		if v, ok := ns.entries[j].histQuantile(h, q, now, win, maxAge, &scratch, slot); ok {
			fn(int(i), &ns.latest[signal.SourceInference][j], v)
		}
	}
}

// slotsFor is m's slots when m is the memo of h, q and win for l's names,
// and nil otherwise (a nil m included).
func (m *QuantileMemo) slotsFor(l *Lookup, h signal.Hist, q float64, win time.Duration) []quantileSlot {
	if m == nil || m.hist != h || m.q != q || m.window != win || len(m.slots) != len(l.names) {
		return nil
	}
	return m.slots
}

// answer is what histQuantile would answer at now, from the slot alone,
// when the slot still holds the pod's window ends: the pod's newest sample
// is the slot's last, and the window (now-win, now] starts after the
// sample before the first and before the first. That reads the pod's
// newest sample, which a list reads anyway, and the slot, both in arrays
// laid out by pod, and none of the window's samples or histograms. hit is
// false when the slot cannot tell (a sample landed, the window moved past
// a sample, a bucket stops at its zero point), and the window must be
// read.
func (s *quantileSlot) answer(newest *Sample, now time.Time, win, maxAge time.Duration) (v float64, ok, hit bool) {
	at, from := now.UnixNano(), now.Add(-win).UnixNano()
	switch {
	case s.lastT == 0 || newest.Time.UnixNano() != s.lastT || s.lastT > at:
		return 0, false, false
	case from < s.prevT || from >= s.firstT:
		return 0, false, false
	case now.Sub(newest.Time) > maxAge || s.none:
		return 0, false, true
	case s.zeroReach < histogram.StartReach(time.Unix(0, s.firstT), time.Unix(0, s.lastT), int(s.n), now, win):
		return 0, false, false
	}
	return s.value, true, true
}

// histQuantile is one entry's share of HistQuantileEachOf, reusing and
// updating slot when it is not nil. The caller holds the read lock.
func (e *entry) histQuantile(k signal.Hist, q float64, now time.Time, win, maxAge time.Duration, scratch *histScratch, slot *quantileSlot) (float64, bool) {
	w := &e.windows[signal.SourceInference]
	if n := w.newest(); n == nil || now.Sub(n.Time()) > maxAge {
		return 0, false
	}
	first, last, ok := w.run(k, now.Add(-win), now)
	if !ok {
		return 0, false
	}
	fp, lp := w.at(first), w.at(last)
	f, l := &fp.hists[k], &lp.hists[k]
	n := int(l.place.seq - f.place.seq + 1)
	prevT := int64(math.MinInt64)
	if first > 0 {
		prevT = w.at(first - 1).time
	}
	startReach := histogram.StartReach(fp.Time(), lp.Time(), n, now, win)
	if slot != nil && slot.lastT == lp.time && slot.firstT == fp.time && slot.firstSeq == f.place.seq && slot.lastSeq == l.place.seq {
		if slot.none {
			return 0, false
		}
		if !(slot.zeroReach < startReach) {
			return slot.value, true
		}
	}
	if f.place.layout != l.place.layout {
		if slot != nil {
			*slot = quantileSlot{firstT: fp.time, lastT: lp.time, firstSeq: f.place.seq, lastSeq: l.place.seq, prevT: prevT, n: int32(n), none: true}
		}
		return 0, false // the buckets changed inside the window
	}
	fh, lh, inc := f.h.unpack(&scratch.first), l.h.unpack(&scratch.last), &scratch.increase
	histogram.IncreaseBetween(inc, fh, lh, f.place.resets, l.place.resets)
	zeroReach := histogram.ZeroReach(inc, fh, fp.Time(), lp.Time())
	v := histogram.Quantile(q, inc)
	if slot != nil {
		*slot = quantileSlot{firstT: fp.time, lastT: lp.time, firstSeq: f.place.seq, lastSeq: l.place.seq, prevT: prevT, n: int32(n), value: v, zeroReach: zeroReach}
	}
	if zeroReach < startReach {
		// Some bucket stops at its zero point: the factors differ.
		v = histogram.Quantile(q, histogram.ExtrapolateInto(inc, inc, fh, fp.Time(), lp.Time(), n, now, win))
	}
	return v, true
}
