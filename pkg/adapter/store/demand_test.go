package store

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// windowHists counts the points of k's inference window holding a
// histogram of kind h, and the ring's size.
func windowHists(s *Store, k Key, h signal.Hist) (held, ring int) {
	w := &s.entry(k).windows[signal.SourceInference]
	for i := 0; i < w.n; i++ {
		if w.at(i).hists[h].h != nil {
			held++
		}
	}
	return held, len(w.buf)
}

// TestLatencyWindowOnDemand: with an idle time, a namespace keeps a kind's
// window only once its quantiles are read, answers once the window spans
// the read's, then exactly as a store that kept everything, and lets the
// window go again after the idle time; the newest histograms, which the
// capacity signal reads, are there throughout.
func TestLatencyWindowOnDemand(t *testing.T) {
	const (
		win  = 30 * time.Second
		step = 5 * time.Second
		idle = 2 * time.Minute
	)
	itl := func(n float64) *histogram.Histogram {
		return &histogram.Histogram{Bounds: []float64{0.05, math.Inf(1)}, Counts: []float64{n, 2 * n}, Count: 2 * n}
	}
	all, lazy := New(8), New(8, WithLatencyWindowIdle(idle))
	k := Key{"ns", "p"}
	l := NewLookup("ns", []string{"p"})
	rng := rand.New(rand.NewPCG(7, 8))
	c := []float64{0, 0, 0}
	at := t0
	put := func() {
		at = at.Add(step)
		c[0] += float64(rng.IntN(4))
		c[1] = c[0] + float64(rng.IntN(4))
		c[2] = c[1] + float64(rng.IntN(4))
		for _, st := range []*Store{all, lazy} {
			st.PutPod(k, signal.SourceInference, Sample{Time: at, TTFT: hist(slices.Clone(c)...), ITL: itl(c[2])})
		}
	}
	quantile := func(st *Store, now time.Time) (float64, bool) {
		var v float64
		ok := false
		emit := func(_ int, _ *Sample, q float64) { v, ok = q, true }
		misses := st.HistQuantileHits(l, signal.HistTTFT, 0.9, nil, now, win, time.Minute, emit)
		st.HistQuantileEachOf(l, signal.HistTTFT, 0.9, nil, misses, now, win, time.Minute, emit)
		return v, ok
	}
	newest := func(st *Store, kind signal.Hist) *histogram.Histogram {
		var got *histogram.Histogram
		st.LatestHistEach(l, signal.SourceInference, kind, at, time.Minute, func(_ int, _ *Sample, h *histogram.Histogram) { got = h })
		return got
	}
	sameNewest := func(when string) {
		t.Helper()
		for kind := range signal.NumHists {
			a, b := newest(all, kind), newest(lazy, kind)
			if a == nil || b == nil || !slices.Equal(a.Counts, b.Counts) {
				t.Fatalf("%s: newest %v histogram %v, want %v", when, kind, b, a)
			}
		}
	}

	for range 20 {
		put()
	}
	for kind := range signal.NumHists {
		if held, ring := windowHists(lazy, k, kind); held != 1 || ring != 1 {
			t.Fatalf("unread: %v window holds %d histograms in a ring of %d, want the newest alone", kind, held, ring)
		}
	}
	sameNewest("unread")

	// The first read starts the TTFT window and is not answered.
	readAt := at
	if _, ok := quantile(lazy, readAt); ok {
		t.Fatal("the read that starts the window was answered")
	}
	if _, ok := lazy.TTFTIncrease(k, readAt, win, time.Minute); ok {
		t.Fatal("an increase was answered before the window spans its length")
	}
	answered := false
	for range 12 {
		put()
		now := at.Add(time.Second)
		want, wantOK := quantile(all, now)
		got, gotOK := quantile(lazy, now)
		if now.Sub(readAt) < win {
			if gotOK {
				t.Fatalf("%v after the first read: answered %v before the window spans %v", now.Sub(readAt), got, win)
			}
			continue
		}
		if !wantOK || !gotOK || got != want {
			t.Fatalf("%v after the first read: %v (%v), want %v (%v)", now.Sub(readAt), got, gotOK, want, wantOK)
		}
		inc, ok := lazy.TTFTIncrease(k, now, win, time.Minute)
		wantInc, _ := all.TTFTIncrease(k, now, win, time.Minute)
		if !ok || !slices.Equal(inc.Counts, wantInc.Counts) {
			t.Fatalf("%v after the first read: increase %v, want %v", now.Sub(readAt), inc, wantInc)
		}
		answered = true
	}
	if !answered {
		t.Fatal("never answered")
	}
	if held, _ := windowHists(lazy, k, signal.HistTTFT); held < 2 {
		t.Fatalf("a read TTFT window holds %d histograms", held)
	}
	if held, _ := windowHists(lazy, k, signal.HistITL); held != 1 {
		t.Fatalf("the unread ITL window holds %d histograms beside a read TTFT one", held)
	}
	sameNewest("TTFT read")

	// Unread for the idle time, the window goes.
	for end := at.Add(idle + step); at.Before(end); {
		put()
	}
	if held, ring := windowHists(lazy, k, signal.HistTTFT); held != 1 || ring != 1 {
		t.Fatalf("idle: the TTFT window holds %d histograms in a ring of %d", held, ring)
	}
	sameNewest("idle")
	if _, ok := quantile(lazy, at); ok {
		t.Fatal("the read that starts the window again was answered")
	}
}

// TestLatencyWindowAlwaysKept: without an idle time every window is kept
// and the first read is answered, as before windows followed reads.
func TestLatencyWindowAlwaysKept(t *testing.T) {
	s := New(8)
	k := Key{"ns", "p"}
	for i := range 6 {
		s.PutPod(k, signal.SourceInference, sample(t0.Add(time.Duration(i)*5*time.Second), 0, hist(float64(i), float64(2*i), float64(3*i))))
	}
	if held, ring := windowHists(s, k, signal.HistTTFT); held != 6 || ring != 8 {
		t.Fatalf("window holds %d histograms in a ring of %d, want 6 in 8", held, ring)
	}
	if _, ok := s.TTFTIncrease(k, t0.Add(25*time.Second), 30*time.Second, time.Minute); !ok {
		t.Fatal("the first read was not answered")
	}
}

// TestDemandNamespacesBounded: reads naming ever more namespaces never
// grow the demand past its bound; past it, a new namespace keeps every
// window and is answered at once, as with no idle time.
func TestDemandNamespacesBounded(t *testing.T) {
	d := demand{idle: time.Minute}
	for i := range 2 * maxDemandNamespaces {
		d.read(fmt.Sprintf("ns-%d", i), signal.HistTTFT, t0, 30*time.Second)
	}
	if len(d.ns) != maxDemandNamespaces {
		t.Fatalf("%d namespaces remembered, want %d", len(d.ns), maxDemandNamespaces)
	}
	if !d.read("one-more", signal.HistTTFT, t0, 30*time.Second) || d.kept("one-more", t0) != keepAll {
		t.Fatal("past the bound a namespace is not kept whole")
	}
	// Once they have been idle, the old namespaces make room.
	later := t0.Add(2 * time.Minute)
	if d.read("later", signal.HistITL, later, 30*time.Second) {
		t.Fatal("a new namespace's first read was answered after the idle ones were forgotten")
	}
	if len(d.ns) != 1 || d.kept("later", later) != [signal.NumHists]bool{signal.HistITL: true} {
		t.Fatalf("after forgetting: %d namespaces, kept %v", len(d.ns), d.kept("later", later))
	}
}

// TestHistogramsRead: which histogram families a namespace's scrapes parse,
// from its readers' reads.
func TestHistogramsRead(t *testing.T) {
	const idle = time.Minute
	if got := New(8).HistogramsRead("ns", t0); got != AllHistograms {
		t.Fatalf("without an idle time: %b, want every family", got)
	}
	s := New(8, WithLatencyWindowIdle(idle))
	steps := []struct {
		name string
		do   func(at time.Time)
		at   time.Duration
		ns   string
		want Histograms
	}{
		{"unread", func(time.Time) {}, 0, "ns", 0},
		{"capacity read", func(at time.Time) { s.ReadHistograms("ns", HistogramsPrefill|HistogramsTTFT, at) }, time.Second, "ns", HistogramsPrefill | HistogramsTTFT},
		{"another namespace", func(time.Time) {}, time.Second, "other", 0},
		{"an ITL quantile read", func(at time.Time) {
			s.HistIncrease(Key{"ns", "p"}, signal.HistITL, at, 30*time.Second, time.Minute)
		}, 30 * time.Second, "ns", AllHistograms},
		{"prefill and TTFT idle, ITL not yet", func(time.Time) {}, time.Second + idle + time.Nanosecond, "ns", HistogramsITL},
		{"all idle", func(time.Time) {}, 30*time.Second + idle + time.Nanosecond, "ns", 0},
	}
	for _, st := range steps {
		at := t0.Add(st.at)
		st.do(at)
		if got := s.HistogramsRead(st.ns, at); got != st.want {
			t.Errorf("%s: %b, want %b", st.name, got, st.want)
		}
	}
}
