package store

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// wantQuantile is what a list must answer for one pod: the quantile of
// HistIncrease's extrapolated increase.
func wantQuantile(s *Store, name string, q float64, now time.Time, win, maxAge time.Duration) (float64, bool) {
	inc, ok := s.HistIncrease(Key{"ns", name}, signal.HistTTFT, now, win, maxAge)
	if !ok {
		return 0, false
	}
	return histogram.Quantile(q, inc), true
}

// sameQuantile: equal up to float rounding (a quantile of an increase and
// of its uniformly extrapolated increase), NaN equal to NaN.
func sameQuantile(a, b float64) bool {
	return a == b || math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) || math.IsNaN(a) && math.IsNaN(b)
}

// listQuantiles lists every name of l, with memo when it is not nil.
func listQuantiles(s *Store, l *Lookup, memo *QuantileMemo, q float64, now time.Time, win, maxAge time.Duration) map[int]float64 {
	got := map[int]float64{}
	fn := func(i int, newest *Sample, v float64) {
		if _, twice := got[i]; twice {
			panic("a name listed twice")
		}
		got[i] = v
	}
	misses := s.HistQuantileHits(l, signal.HistTTFT, q, memo, now, win, maxAge, fn)
	s.HistQuantileEachOf(l, signal.HistTTFT, q, memo, misses, now, win, maxAge, fn)
	return got
}

// TestHistQuantileEachOf: the list answers, pod by pod, the quantile of
// what HistIncrease answers, with a memo and without, with bucket layouts
// of different sizes in a row (the scratch histograms are reused), and
// skips the pods HistIncrease has no answer for.
func TestHistQuantileEachOf(t *testing.T) {
	s := New(8)
	wide := func(c ...float64) *histogram.Histogram {
		return &histogram.Histogram{Bounds: []float64{0.05, 0.1, 0.5, 1, 5, math.Inf(1)}, Counts: c, Count: c[len(c)-1], Sum: c[len(c)-1]}
	}
	now := t0.Add(time.Minute)
	put := func(name string, at time.Time, h *histogram.Histogram) {
		s.PutPod(Key{"ns", name}, signal.SourceInference, sample(at, 1, h))
	}
	for k, at := range []time.Time{now.Add(-40 * time.Second), now.Add(-25 * time.Second), now.Add(-10 * time.Second)} {
		f := float64(k)
		put("narrow", at, hist(100+2*f, 200+5*f, 300+6*f))
		put("wide", at, wide(f, 3*f, 4*f, 9*f, 10*f, 12*f)) // a fresh server: starts at zero
		put("narrow-reset", at, hist(7-f, 8-f, 9-f))
		put("stale", at.Add(-time.Hour), hist(f, f, f))
		put("idle", at, hist(5, 6, 7))
	}
	put("relayout", now.Add(-20*time.Second), hist(1, 2, 3))
	put("relayout", now.Add(-5*time.Second), wide(1, 2, 3, 4, 5, 6))
	put("one-sample", now.Add(-5*time.Second), hist(1, 2, 3))
	names := []string{"narrow", "wide", "missing", "stale", "narrow-reset", "one-sample", "wide", "idle", "relayout"}
	l := NewLookup("ns", names)
	memo := l.Quantiles(signal.HistTTFT, 0.9, time.Minute)
	if !memo.TryAcquire() {
		t.Fatal("a new memo is taken")
	}
	defer memo.Release()
	for _, run := range []struct {
		name string
		memo *QuantileMemo
	}{{"no memo", nil}, {"memo, first list", memo}, {"memo, second list", memo}} {
		got := listQuantiles(s, l, run.memo, 0.9, now, time.Minute, 30*time.Second)
		for i, n := range names {
			want, ok := wantQuantile(s, n, 0.9, now, time.Minute, 30*time.Second)
			switch g, listed := got[i]; {
			case ok != listed:
				t.Errorf("%s: %s listed %v, HistIncrease %v", run.name, n, listed, ok)
			case ok && !sameQuantile(g, want):
				t.Errorf("%s: %s listed %v, want %v", run.name, n, g, want)
			}
		}
		if len(got) != 5 {
			t.Errorf("%s: %d pods listed, want narrow, wide twice, narrow-reset and idle", run.name, len(got))
		}
	}
}

// TestHistQuantileHits: the list's first half answers from the memo the
// pods whose window ends are those of the last list and leaves the rest
// (a pod just scraped, every pod without a memo, none for a pod the store
// lacks) to the second half.
func TestHistQuantileHits(t *testing.T) {
	const win, maxAge = 30 * time.Second, time.Minute
	s := New(16)
	put := func(name string, k int) {
		f := float64(k)
		s.PutPod(Key{"ns", name}, signal.SourceInference, sample(t0.Add(time.Duration(k)*5*time.Second), 1, hist(1000+f, 2000+3*f, 3000+4*f)))
	}
	for k := range 5 {
		put("a", k)
		put("b", k)
		put("c", k)
	}
	l := NewLookup("ns", []string{"a", "missing", "b", "c"})
	memo := l.Quantiles(signal.HistTTFT, 0.5, win)
	if !memo.TryAcquire() {
		t.Fatal("a new memo is taken")
	}
	defer memo.Release()
	hits := func(m *QuantileMemo, now time.Duration) (answered []int, misses []int32) {
		misses = s.HistQuantileHits(l, signal.HistTTFT, 0.5, m, t0.Add(now), win, maxAge, func(i int, _ *Sample, _ float64) {
			answered = append(answered, i)
		})
		return answered, misses
	}
	for _, step := range []struct {
		name         string
		now          time.Duration
		scrape       string
		memo         *QuantileMemo
		wantAnswered []int
		wantMisses   []int32
	}{
		{"an empty memo", 21 * time.Second, "", memo, nil, []int32{0, 2, 3}},
		{"ends unchanged", 23 * time.Second, "", memo, []int{0, 2, 3}, []int32{}},
		{"b scraped", 26 * time.Second, "b", memo, []int{0, 3}, []int32{2}},
		{"no memo", 27 * time.Second, "", nil, nil, []int32{0, 2, 3}},
	} {
		if step.scrape != "" {
			put(step.scrape, 5)
		}
		answered, misses := hits(step.memo, step.now)
		if !slices.Equal(answered, step.wantAnswered) || !slices.Equal(misses, step.wantMisses) {
			t.Errorf("%s: answered %v, misses %v; want %v, %v", step.name, answered, misses, step.wantAnswered, step.wantMisses)
		}
		// The second half fills the memo, as a list does.
		s.HistQuantileEachOf(l, signal.HistTTFT, 0.5, step.memo, misses, t0.Add(step.now), win, maxAge, func(int, *Sample, float64) {})
	}
}

// TestQuantileMemoReuse: a memo's quantile is answered while the pod's
// window ends stay the same and one factor extrapolates every bucket, and
// is worked out again when a sample lands, when the window's start passes
// a sample, and at every list where a bucket stops at its zero point. The
// memo's value is planted to tell a reuse from a fresh answer.
func TestQuantileMemoReuse(t *testing.T) {
	const win, maxAge = 30 * time.Second, time.Minute
	s := New(16)
	for k := range 5 { // 0, 5, ..., 20 s
		f := float64(k)
		at := t0.Add(time.Duration(k) * 5 * time.Second)
		s.PutPod(Key{"ns", "old"}, signal.SourceInference, sample(at, 1, hist(1000+f, 2000+3*f, 3000+4*f)))
		s.PutPod(Key{"ns", "fresh"}, signal.SourceInference, sample(at, 1, hist(f, 3*f, 4*f)))
	}
	l := NewLookup("ns", []string{"old", "fresh"})
	memo := l.Quantiles(signal.HistTTFT, 0.5, win)
	if !memo.TryAcquire() {
		t.Fatal("a new memo is taken")
	}
	defer memo.Release()
	const planted = 42.0
	list := func(now time.Time) map[int]float64 {
		return listQuantiles(s, l, memo, 0.5, now, win, maxAge)
	}
	now := t0.Add(21 * time.Second) // window (-9 s, 21 s]: samples 0..20 s
	list(now)
	memo.slots[0].value, memo.slots[1].value = planted, planted
	for _, step := range []struct {
		name               string
		now                time.Duration
		put                bool
		wantOld, wantFresh bool // planted value answered
	}{
		{"same ends, later", 23 * time.Second, false, true, false},
		{"same ends, later still", 24 * time.Second, false, true, false},
		{"a sample landed", 26 * time.Second, true, false, false},
		{"same ends again", 27 * time.Second, false, true, false},
		// Window (1 s, 31 s]: the sample at 0 s left it.
		{"the start passed a sample", 31 * time.Second, false, false, false},
	} {
		if step.put {
			at := t0.Add(25 * time.Second)
			s.PutPod(Key{"ns", "old"}, signal.SourceInference, sample(at, 1, hist(1005, 2015, 3020)))
			s.PutPod(Key{"ns", "fresh"}, signal.SourceInference, sample(at, 1, hist(5, 15, 20)))
		}
		got := list(t0.Add(step.now))
		if (got[0] == planted) != step.wantOld || (got[1] == planted) != step.wantFresh {
			t.Errorf("%s: old %v (memo %v), fresh %v (memo %v)", step.name, got[0], step.wantOld, got[1], step.wantFresh)
		}
		for i, n := range []string{"old", "fresh"} {
			if want, _ := wantQuantile(s, n, 0.5, t0.Add(step.now), win, maxAge); got[i] != planted && !sameQuantile(got[i], want) {
				t.Errorf("%s: %s listed %v, want %v", step.name, n, got[i], want)
			}
		}
		memo.slots[0].value, memo.slots[1].value = planted, planted
	}
}

// TestQuantileMemoAgrees: over random histories (restarts, layout
// changes, servers started inside the window, gaps) listed at random
// times, a list with a memo answers what one without answers.
func TestQuantileMemoAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	layouts := [][]float64{{0.1, 1, math.Inf(1)}, {0.05, 0.5, 2, 8, math.Inf(1)}}
	for trial := range 40 {
		s := New(4 + rng.IntN(20))
		names := []string{"a", "b", "c", "d", "e"}
		l := NewLookup("ns", names)
		win := time.Duration(10+rng.IntN(60)) * time.Second
		q := []float64{0.5, 0.9, 0.99}[rng.IntN(3)]
		memo := l.Quantiles(signal.HistTTFT, q, win)
		if !memo.TryAcquire() {
			t.Fatal("a new memo is taken")
		}
		counts := make([][]float64, len(names))
		layout := make([]int, len(names))
		now := t0
		for step := range 200 {
			now = now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
			for p, n := range names {
				if rng.IntN(3) != 0 {
					continue
				}
				switch r := rng.IntN(40); {
				case counts[p] == nil || r == 0: // a start, or a restart
					counts[p] = make([]float64, len(layouts[layout[p]]))
				case r == 1:
					layout[p] = 1 - layout[p]
					counts[p] = make([]float64, len(layouts[layout[p]]))
				}
				c := counts[p]
				for i := range c {
					c[i] += float64(rng.IntN(4))
					if i > 0 {
						c[i] = max(c[i], c[i-1])
					}
				}
				h := &histogram.Histogram{Bounds: layouts[layout[p]], Counts: append([]float64(nil), c...), Count: c[len(c)-1]}
				s.PutPod(Key{"ns", n}, signal.SourceInference, sample(now, 1, h))
			}
			with := listQuantiles(s, l, memo, q, now, win, time.Minute)
			without := listQuantiles(s, l, nil, q, now, win, time.Minute)
			if len(with) != len(without) {
				t.Fatalf("trial %d step %d: %d listed with the memo, %d without", trial, step, len(with), len(without))
			}
			for i, v := range without {
				if !sameQuantile(with[i], v) {
					t.Fatalf("trial %d step %d: %s = %v with the memo, %v without", trial, step, names[i], with[i], v)
				}
			}
		}
		memo.Release()
	}
}

// TestLookupQuantiles: one memo per quantile, kind and window, bounded;
// a memo another list holds is not acquired.
func TestLookupQuantiles(t *testing.T) {
	l := NewLookup("ns", []string{"a"})
	m := l.Quantiles(signal.HistTTFT, 0.9, time.Minute)
	if l.Quantiles(signal.HistTTFT, 0.9, time.Minute) != m {
		t.Error("the same quantile got a second memo")
	}
	if l.Quantiles(signal.HistITL, 0.9, time.Minute) == m || l.Quantiles(signal.HistTTFT, 0.5, time.Minute) == m || l.Quantiles(signal.HistTTFT, 0.9, time.Hour) == m {
		t.Error("another kind, quantile or window shares a memo")
	}
	for i := range maxQuantileMemos {
		l.Quantiles(signal.HistTTFT, float64(i)/100, time.Minute)
	}
	if got := l.Quantiles(signal.HistTTFT, 0.123, time.Minute); got != nil {
		t.Error("memos past the bound")
	}
	if got := l.Quantiles(signal.HistTTFT, 0.123, time.Minute); got.TryAcquire() {
		t.Error("a nil memo was acquired")
	}
	if !m.TryAcquire() {
		t.Fatal("a free memo was not acquired")
	}
	if m.TryAcquire() {
		t.Error("a held memo was acquired twice")
	}
	m.Release()
}

// TestQuantileSlotAnswer: a slot answers from itself only while its window
// ends are the pod's at now, whichever way now moved since the slot was
// filled.
func TestQuantileSlotAnswer(t *testing.T) {
	const win, maxAge = 30 * time.Second, time.Minute
	sec := func(s float64) int64 { return t0.Add(time.Duration(s * float64(time.Second))).UnixNano() }
	// Samples every 5 s; at now = 31 s the window (1 s, 31 s] runs from
	// the sample at 5 s (the one before it at 0 s) to the one at 30 s.
	slot := quantileSlot{firstT: sec(5), lastT: sec(30), prevT: sec(0), n: 6, value: 0.42, zeroReach: math.Inf(1)}
	newest := Sample{Time: time.Unix(0, sec(30))}
	for _, tc := range []struct {
		name        string
		slot        func(*quantileSlot)
		newest      int64
		now         float64
		wantHit, ok bool
	}{
		{"the same ends", nil, sec(30), 31, true, true},
		{"the same ends, later", nil, sec(30), 34.9, true, true},
		{"the window's start passed the first", nil, sec(30), 35, false, false},
		{"a sample landed", nil, sec(35), 36, false, false},
		{"now went back past the sample before", nil, sec(30), 30, true, true},
		{"now went back before the last", nil, sec(30), 29.9, false, false},
		{"now went back far enough to take the sample before", func(s *quantileSlot) { s.prevT = sec(2) }, sec(30), 31.5, false, false},
		// A minute past the newest sample the window has moved on too.
		{"stale", nil, sec(30), 91, false, false},
		{"no increase", func(s *quantileSlot) { s.none = true }, sec(30), 31, true, false},
		{"a bucket stops at zero", func(s *quantileSlot) { s.zeroReach = 0.1 }, sec(30), 31, false, false},
		{"empty", func(s *quantileSlot) { *s = quantileSlot{} }, sec(30), 31, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := slot
			if tc.slot != nil {
				tc.slot(&s)
			}
			n := newest
			n.Time = time.Unix(0, tc.newest)
			now := time.Unix(0, sec(tc.now))
			v, ok, hit := s.answer(&n, now, win, maxAge)
			if hit != tc.wantHit || ok != tc.ok || ok && v != 0.42 {
				t.Errorf("answer = %v, ok %v, hit %v; want hit %v, ok %v", v, ok, hit, tc.wantHit, tc.ok)
			}
		})
	}
}
