package store

import (
	"slices"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// histPlace is what a window's histogram increase needs of a sample besides
// its histogram, so that the increase over any window comes from its two
// end samples (histogram.IncreaseBetween) rather than from all of them.
type histPlace struct {
	// seq numbers the window's samples that have a histogram of the kind.
	seq uint32
	// layout numbers the bucket layouts the window has seen: an increase
	// across two layouts is meaningless.
	layout uint32
	// resets are the series' running reset totals at this sample.
	resets *histogram.Resets
}

// window is a ring of what an object's samples from one source leave
// behind, oldest first. Scalar signals are read from the newest sample only
// (objects.latest), so the window keeps of each sample just what a
// histogram increase reads: 56 bytes, which at 10,000 pods and the default
// 14 samples each is 7.5 MiB, besides the histograms. Only a source with
// histograms has one (put).
type window struct {
	buf   []point
	start int
	n     int
	// seq and layouts are the last histPlace numbers handed out, per
	// kind.
	seq, layouts [signal.NumHists]uint32
	// step is the time between the two newest samples.
	step time.Duration
}

// point is a window's record of one sample.
type point struct {
	// time is the sample's, in Unix nanoseconds.
	time int64
	// hists are the sample's histograms by kind.
	hists [signal.NumHists]histPoint
}

// histPoint is one histogram of a point.
type histPoint struct {
	// h is the histogram, nil when the sample had none or it is past
	// retention.
	h     *packedHist
	place histPlace
}

func (p *point) Time() time.Time { return time.Unix(0, p.time) }

// place stores h as p's histogram of kind k, the successor in its series
// of the window's newest point with one.
func (w *window) place(p *point, k signal.Hist, h *histogram.Histogram, lay *layouts) {
	w.seq[k]++
	hp := &p.hists[k]
	hp.place = histPlace{seq: w.seq[k]}
	for i := w.n - 1; i >= 0; i-- {
		prev := &w.at(i).hists[k]
		if prev.h == nil {
			continue
		}
		var scratch histogram.Histogram
		if prevH := prev.h.unpack(&scratch); histogram.SameBounds(prevH, h) {
			// Every scrape parses the bounds afresh; keeping one copy
			// per series saves a third of a window's memory (23
			// bounds of vLLM's layout in every sample).
			h.Bounds = prevH.Bounds
			hp.place.layout = prev.place.layout
			hp.place.resets = histogram.NextResets(prev.place.resets, prevH, h)
			hp.h = pack(h, prev.h.base)
			return
		}
		break
	}
	w.layouts[k]++
	hp.place.layout = w.layouts[k]
	h.Bounds = lay.share(h, nil)
	hp.h = pack(h, nil)
}

func (w *window) push(p point, capacity int) {
	if w.buf == nil {
		w.buf = make([]point, capacity)
	}
	if w.n > 0 {
		w.step = time.Duration(p.time - w.newest().time)
	}
	if w.n < len(w.buf) {
		w.buf[(w.start+w.n)%len(w.buf)] = p
		w.n++
		return
	}
	w.buf[w.start] = p
	w.start = (w.start + 1) % len(w.buf)
}

func (w *window) at(i int) *point { return &w.buf[(w.start+i)%len(w.buf)] }

func (w *window) newest() *point {
	if w.n == 0 {
		return nil
	}
	return w.at(w.n - 1)
}

// run returns the first and last samples with a histogram of kind k in
// (from, to], false unless there are two such. Samples are in time order
// (put drops any that is not newer), so the window's samples are one run.
func (w *window) run(k signal.Hist, from, to time.Time) (first, last int, ok bool) {
	first, last = w.firstAfter(from.UnixNano()), w.n-1
	for end := to.UnixNano(); last >= first && (w.at(last).time > end || w.at(last).hists[k].h == nil); {
		last--
	}
	for first < last && w.at(first).hists[k].h == nil {
		first++
	}
	return first, last, first < last
}

// firstAfter returns the index of the oldest sample after t, w.n if none.
// Scrapes come at a steady interval, so it starts where the last interval
// puts t and walks from there: at 10,000 pods each sample read is a cache
// miss, and a binary search's scattered reads were a third of a TTFT
// list's time; this reads one or two neighbours.
func (w *window) firstAfter(t int64) int {
	if w.n == 0 || w.at(w.n-1).time <= t {
		return w.n
	}
	i := w.n - 1
	if w.step > 0 {
		i = max(0, i-int(time.Duration(w.at(i).time-t)/w.step))
	}
	for i > 0 && w.at(i-1).time > t {
		i--
	}
	for w.at(i).time <= t {
		i++
	}
	return i
}

// put appends smp, newer than the window's newest, to w. A window is what
// histogram increases read, so one is started only by a sample with a
// histogram: a source that never has one (the GPU's, the nodes') keeps no
// window at all, which at 10,000 pods saves 7.5 MiB of sample times nothing
// reads. Once started, a window takes every sample, so that its newest is
// the object's.
//
// Of a kind whose window is not kept (kept, demand), only the newest
// point keeps a histogram, and with neither kind kept the ring holds the
// newest point alone.
func put(w *window, smp Sample, keep retention, lay *layouts, kept [signal.NumHists]bool) {
	p := point{time: smp.Time.UnixNano()}
	hists, anyKept := false, false
	for k := range signal.NumHists {
		if h := smp.Hist(k); h != nil {
			w.place(&p, k, h, lay)
			hists = true
		}
		anyKept = anyKept || kept[k]
	}
	if !hists && w.buf == nil {
		return
	}
	capacity := keep.samples
	if !anyKept {
		capacity = 1
	}
	w.resize(capacity)
	w.push(p, capacity)
	if keep.ttft > 0 {
		w.dropTTFTBefore(p.time - int64(keep.ttft))
	}
	for k := range signal.NumHists {
		if !kept[k] {
			w.dropOlder(k)
		}
	}
}

// resize gives the ring room for capacity points, keeping the newest ones
// in order, when it has another size.
func (w *window) resize(capacity int) {
	if w.buf == nil || len(w.buf) == capacity {
		return
	}
	buf := make([]point, capacity)
	n := min(w.n, capacity)
	for i := range n {
		buf[i] = *w.at(w.n - n + i)
	}
	w.buf, w.start, w.n = buf, 0, n
}

// dropOlder drops the histograms of kind k of every point but the newest.
func (w *window) dropOlder(k signal.Hist) {
	for i := 0; i < w.n-1; i++ {
		hp := &w.at(i).hists[k]
		hp.h, hp.place.resets = nil, nil
	}
}

// dropTTFTBefore drops the latency histograms of the points at or before
// t, never the newest's.
func (w *window) dropTTFTBefore(t int64) {
	for i := 0; i < w.n-1; i++ {
		p := w.at(i)
		if p.time > t {
			return
		}
		for k := range p.hists {
			p.hists[k].h, p.hists[k].place.resets = nil, nil
		}
	}
}

// histScratch is where a list of histogram increases unpacks each window's
// end histograms and computes its increase, one pod after another.
type histScratch struct {
	first, last, increase histogram.Histogram
}

// histIncrease is HistIncrease of one entry, worked out in scratch, or in
// new histograms when scratch is nil. The caller holds the read lock.
func (e *entry) histIncrease(k signal.Hist, now time.Time, win, maxAge time.Duration, scratch *histScratch) (*histogram.Histogram, bool) {
	w := &e.windows[signal.SourceInference]
	if n := w.newest(); n == nil || now.Sub(n.Time()) > maxAge {
		return nil, false
	}
	first, last, ok := w.run(k, now.Add(-win), now)
	if !ok {
		return nil, false
	}
	fp, lp := w.at(first), w.at(last)
	f, l := &fp.hists[k], &lp.hists[k]
	if f.place.layout != l.place.layout {
		return nil, false // the buckets changed inside the window
	}
	keep := scratch == nil
	if keep {
		scratch = &histScratch{}
	}
	fh, lh, out := f.h.unpack(&scratch.first), l.h.unpack(&scratch.last), &scratch.increase
	histogram.IncreaseBetween(out, fh, lh, f.place.resets, l.place.resets)
	n := int(l.place.seq - f.place.seq + 1)
	histogram.ExtrapolateInto(out, out, fh, fp.Time(), lp.Time(), n, now, win)
	if keep {
		out.Bounds = slices.Clone(out.Bounds) // the caller keeps it; not the stored sample's
	}
	return out, true
}
