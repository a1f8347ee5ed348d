package store

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func sample(at time.Time, queue float64, ttft *histogram.Histogram) Sample {
	s := Sample{Time: at, TTFT: ttft}
	s.Set(signal.QueueDepth, queue)
	return s
}

func hist(c ...float64) *histogram.Histogram {
	b := []float64{0.1, 1, math.Inf(1)}
	h := &histogram.Histogram{Bounds: b, Counts: c, Count: c[len(c)-1]}
	return h
}

func TestLatestStaleness(t *testing.T) {
	s := New(4)
	k := Key{"ns", "p"}
	if _, ok := s.Latest(k, signal.SourceInference, t0, time.Second); ok {
		t.Fatal("empty store has a sample")
	}
	s.PutPod(k, signal.SourceInference, sample(t0, 3, nil))
	s.PutPod(k, signal.SourceInference, sample(t0.Add(-time.Second), 99, nil)) // out of order: dropped
	cases := []struct {
		now    time.Time
		maxAge time.Duration
		ok     bool
	}{
		{t0, 0, true},
		{t0.Add(15 * time.Second), 15 * time.Second, true},
		{t0.Add(15*time.Second + 1), 15 * time.Second, false},
	}
	for _, tc := range cases {
		smp, ok := s.Latest(k, signal.SourceInference, tc.now, tc.maxAge)
		if ok != tc.ok {
			t.Fatalf("now=%v: ok=%v want %v", tc.now, ok, tc.ok)
		}
		if v, _ := smp.Get(signal.QueueDepth); ok && v != 3 {
			t.Fatalf("value %v, want 3 (the out-of-order sample must be dropped)", v)
		}
	}
	if _, ok := s.Latest(k, signal.SourceGPU, t0, time.Minute); ok {
		t.Fatal("GPU source has no sample")
	}
}

func TestRingKeepsNewest(t *testing.T) {
	s := New(3)
	k := Key{"ns", "p"}
	var kept []histogram.Sample
	for i := 0; i < 10; i++ {
		at := t0.Add(time.Duration(i) * 5 * time.Second)
		h := hist(float64(i), float64(2*i), float64(3*i))
		s.PutPod(k, signal.SourceInference, sample(at, float64(i), h))
		if i >= 7 {
			kept = append(kept, histogram.Sample{T: at, H: h})
		}
	}
	now := t0.Add(45 * time.Second)
	if smp, _ := s.Latest(k, signal.SourceInference, now, time.Minute); smp.values[signal.QueueDepth] != 9 {
		t.Fatalf("latest = %v, want 9", smp.values[signal.QueueDepth])
	}
	// Only the newest three samples are kept, however long the window.
	got, ok := s.TTFTIncrease(k, now, time.Hour, time.Minute)
	want, err := histogram.ExtrapolatedIncrease(kept, now, time.Hour)
	if !ok || err != nil {
		t.Fatalf("ok=%v err=%v", ok, err)
	}
	for i := range want.Counts {
		if got.Counts[i] != want.Counts[i] {
			t.Fatalf("bucket %d: %v, want %v (from the three newest samples)", i, got.Counts[i], want.Counts[i])
		}
	}
}

// TestTTFTIncreaseMatchesPromQL checks the store's memoised path against
// the histogram package's PromQL-exact ExtrapolatedIncrease at several
// evaluation times, including a counter reset.
func TestTTFTIncreaseMatchesPromQL(t *testing.T) {
	s := New(30)
	k := Key{"ns", "p"}
	var all []histogram.Sample
	counts := [][]float64{{0, 1, 1}, {2, 5, 6}, {4, 9, 12}, {1, 2, 2} /* reset */, {3, 8, 9}, {9, 20, 25}}
	for i, c := range counts {
		at := t0.Add(time.Duration(i) * 5 * time.Second).Add(time.Duration(i*37) * time.Millisecond)
		h := hist(c...)
		s.PutPod(k, signal.SourceInference, sample(at, 0, h))
		all = append(all, histogram.Sample{T: at, H: h})
		if i%2 == 1 {
			// A scrape without the histogram: Prometheus would have no
			// sample of the bucket series then.
			s.PutPod(k, signal.SourceInference, sample(at.Add(2*time.Second), 0, nil))
		}
	}
	for at := 12 * time.Second; at <= 40*time.Second; at += 250 * time.Millisecond {
		now := t0.Add(at)
		got, ok := s.TTFTIncrease(k, now, 20*time.Second, time.Minute)
		want, err := histogram.ExtrapolatedIncrease(all, now, 20*time.Second)
		if !ok || err != nil {
			t.Fatalf("at %v: ok=%v err=%v", at, ok, err)
		}
		for i := range want.Counts {
			if math.Abs(got.Counts[i]-want.Counts[i]) > 1e-9 {
				t.Fatalf("at %v bucket %d: %v, want %v", at, i, got.Counts[i], want.Counts[i])
			}
		}
	}
	if _, ok := s.TTFTIncrease(k, t0.Add(10*time.Minute), 20*time.Second, time.Minute); ok {
		t.Fatal("stale pod must give no increase")
	}
}

func TestForgetAndCoverage(t *testing.T) {
	s := New(4)
	s.PutPod(Key{"ns", "old"}, signal.SourceInference, sample(t0, 1, nil))
	s.PutPod(Key{"ns", "new"}, signal.SourceInference, sample(t0.Add(time.Minute), 1, hist(1, 1, 1)))
	var n Sample
	n.Time = t0
	n.Set(signal.GPUUtilization, 50)
	s.PutNode("node", n)
	cov := s.PodCoverage(t0.Add(time.Minute), 10*time.Second)
	if cov[signal.QueueDepth].Fresh != 1 || cov[signal.NumSignals].Fresh != 1 || cov[signal.GPUUtilization].Fresh != 0 {
		t.Fatalf("coverage = %+v", cov)
	}
	pods, nodes := s.Forget(t0.Add(time.Minute), 10*time.Second)
	if pods != 1 || nodes != 1 {
		t.Fatalf("forgot %d pods %d nodes, want 1 and 1", pods, nodes)
	}
	if p, n := s.Len(); p != 1 || n != 0 {
		t.Fatalf("left %d pods %d nodes", p, n)
	}
}

func TestLatestEach(t *testing.T) {
	s := New(4)
	s.PutPod(Key{"ns", "fresh"}, signal.SourceInference, sample(t0, 5, nil))
	s.PutPod(Key{"ns", "stale"}, signal.SourceInference, sample(t0.Add(-time.Minute), 6, nil))
	s.PutPod(Key{"other", "fresh"}, signal.SourceInference, sample(t0, 7, nil))
	s.PutPod(Key{"ns", "gpu-only"}, signal.SourceGPU, sample(t0, 8, nil))
	names := []string{"fresh", "stale", "missing", "gpu-only"}
	got := map[int]float64{}
	s.LatestEach(NewLookup("ns", names), signal.SourceInference, t0, 10*time.Second, func(i int, smp *Sample) {
		got[i], _ = smp.Get(signal.QueueDepth)
	})
	if len(got) != 1 || got[0] != 5 {
		t.Fatalf("got %v, want only the fresh pod of namespace ns (index 0, value 5)", got)
	}
	s.LatestEach(NewLookup("absent", names), signal.SourceInference, t0, time.Hour, func(int, *Sample) {
		t.Fatal("no pod in an unknown namespace")
	})
}

// TestLookupFollowsMembership: a Lookup kept across calls answers what a
// new one would after pods arrive, are forgotten (moving others into their
// slots), and after the whole namespace is forgotten and comes back.
func TestLookupFollowsMembership(t *testing.T) {
	s := New(4)
	names := []string{"a", "b", "c", "d"}
	kept := NewLookup("ns", names)
	list := func(l *Lookup, now time.Time) map[int]float64 {
		got := map[int]float64{}
		s.LatestEach(l, signal.SourceInference, now, 10*time.Second, func(i int, smp *Sample) { got[i], _ = smp.Get(signal.QueueDepth) })
		return got
	}
	steps := []struct {
		name string
		do   func()
		now  time.Time
		want map[int]float64
	}{
		{"a and c", func() {
			s.PutPod(Key{"ns", "a"}, signal.SourceInference, sample(t0, 1, nil))
			s.PutPod(Key{"ns", "c"}, signal.SourceInference, sample(t0, 3, nil))
		}, t0, map[int]float64{0: 1, 2: 3}},
		{"b, d and a stranger arrive", func() {
			s.PutPod(Key{"ns", "x"}, signal.SourceInference, sample(t0, 9, nil))
			s.PutPod(Key{"ns", "b"}, signal.SourceInference, sample(t0, 2, nil))
			s.PutPod(Key{"ns", "d"}, signal.SourceInference, sample(t0, 4, nil))
		}, t0, map[int]float64{0: 1, 1: 2, 2: 3, 3: 4}},
		{"a forgotten, the others move", func() {
			now := t0.Add(30 * time.Second)
			for i, n := range []string{"b", "c", "d", "x"} {
				s.PutPod(Key{"ns", n}, signal.SourceInference, sample(now, float64(20+i), nil))
			}
			s.Forget(now, 10*time.Second)
		}, t0.Add(30 * time.Second), map[int]float64{1: 20, 2: 21, 3: 22}},
		{"namespace forgotten and back", func() {
			now := t0.Add(time.Hour)
			s.Forget(now, 10*time.Second)
			// As many arrivals as the old namespace had changes, so
			// that only its identity tells the two apart.
			for i, n := range []string{"d", "y1", "y2", "y3", "y4", "y5"} {
				s.PutPod(Key{"ns", n}, signal.SourceInference, sample(now, float64(40+i), nil))
			}
		}, t0.Add(time.Hour), map[int]float64{3: 40}},
	}
	for _, st := range steps {
		list(kept, st.now) // resolve before the change, so the change must be noticed
		st.do()
		if got, fresh := list(kept, st.now), list(NewLookup("ns", names), st.now); !maps.Equal(got, st.want) || !maps.Equal(fresh, st.want) {
			t.Errorf("%s: kept lookup %v, new lookup %v, want %v", st.name, got, fresh, st.want)
		}
	}
}

// TestForgetKeepsTheOthers: forgetting pods in the middle of a namespace
// leaves every other pod with its own samples (newest and window), and a
// forgotten pod that comes back starts afresh.
func TestForgetKeepsTheOthers(t *testing.T) {
	s := New(4)
	now := t0.Add(time.Minute)
	names := []string{"p0", "p1", "p2", "p3", "p4", "p5"}
	gone := map[string]bool{"p0": true, "p2": true, "p5": true}
	alone := map[string]*Store{} // each pod in a store of its own
	for i, n := range names {
		at := now.Add(-time.Second)
		if gone[n] {
			at = t0
		}
		var g Sample
		g.Time = at
		g.Set(signal.GPUUtilization, float64(10*i))
		alone[n] = New(4)
		for _, st := range []*Store{s, alone[n]} {
			st.PutPod(Key{"ns", n}, signal.SourceInference, sample(at.Add(-10*time.Second), float64(100+i), hist(0, 0, 0)))
			st.PutPod(Key{"ns", n}, signal.SourceInference, sample(at, float64(i), hist(float64(i), float64(2*i), float64(3*i))))
			st.PutPod(Key{"ns", n}, signal.SourceGPU, g)
		}
	}
	if pods, _ := s.Forget(now, 10*time.Second); pods != len(gone) {
		t.Fatalf("forgot %d pods, want %d", pods, len(gone))
	}
	if p, _ := s.Len(); p != len(names)-len(gone) {
		t.Fatalf("%d pods left, want %d", p, len(names)-len(gone))
	}
	got := map[int]float64{}
	s.LatestEach(NewLookup("ns", names), signal.SourceInference, now, time.Hour, func(i int, smp *Sample) {
		got[i], _ = smp.Get(signal.QueueDepth)
	})
	for i, n := range names {
		k := Key{"ns", n}
		smp, ok := s.Latest(k, signal.SourceInference, now, time.Hour)
		gpu, gpuOK := s.Latest(k, signal.SourceGPU, now, time.Hour)
		inc, incOK := s.TTFTIncrease(k, now, time.Hour, time.Hour)
		v, listed := got[i]
		if gone[n] {
			if ok || gpuOK || incOK || listed {
				t.Errorf("%s was forgotten but has samples", n)
			}
			continue
		}
		if q, _ := smp.Get(signal.QueueDepth); !ok || q != float64(i) || !listed || v != float64(i) {
			t.Errorf("%s: queue %v (%v), listed %v (%v); want %d", n, q, ok, v, listed, i)
		}
		if u, _ := gpu.Get(signal.GPUUtilization); !gpuOK || u != float64(10*i) {
			t.Errorf("%s: gpu %v (%v), want %d", n, u, gpuOK, 10*i)
		}
		want, _ := alone[n].TTFTIncrease(k, now, time.Hour, time.Hour)
		if !incOK || !slices.Equal(inc.Counts, want.Counts) {
			t.Errorf("%s: ttft increase %v (%v), want its own window's %v", n, inc, incOK, want)
		}
	}
	s.PutPod(Key{"ns", "p0"}, signal.SourceInference, sample(now, 42, hist(50, 50, 50)))
	if smp, ok := s.Latest(Key{"ns", "p0"}, signal.SourceInference, now, time.Second); !ok || smp.values[signal.QueueDepth] != 42 {
		t.Errorf("p0 back: %v, %v; want 42", smp.values[signal.QueueDepth], ok)
	}
	if _, ok := s.TTFTIncrease(Key{"ns", "p0"}, now, time.Hour, time.Hour); ok {
		t.Error("p0 back: its old window must be gone")
	}
	if _, ok := s.Latest(Key{"ns", "p0"}, signal.SourceGPU, now, time.Hour); ok {
		t.Error("p0 back: its old GPU sample must be gone")
	}
	if pods, _ := s.Forget(now.Add(time.Hour), time.Second); pods != len(names)-len(gone)+1 {
		t.Errorf("forgot %d, want all %d", pods, len(names)-len(gone)+1)
	}
	if p, _ := s.Len(); p != 0 {
		t.Errorf("%d pods left after forgetting all", p)
	}
}

// BenchmarkLatestEach10k is the store's part of the HPA's Pods-metric call:
// the newest queue depth of 10,000 pods of one namespace, each with a full
// window of samples, asked in an order unrelated to insertion. "kept"
// reuses one Lookup, as the provider does while the pods do not change;
// "new" resolves every name on every call, as after a change.
func BenchmarkLatestEach10k(b *testing.B) {
	s := New(24)
	names := make([]string, 10000)
	for i := range names {
		names[i] = fmt.Sprintf("llm-%05d", i)
		for j := range 24 {
			at := t0.Add(time.Duration(j-23) * 5 * time.Second)
			s.PutPod(Key{"ml", names[i]}, signal.SourceInference, sample(at, float64(i%9), hist(float64(j), float64(2*j), float64(3*j))))
		}
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	kept := NewLookup("ml", names)
	for _, bc := range []struct {
		name   string
		lookup func() *Lookup
	}{
		{"kept", func() *Lookup { return kept }},
		{"new", func() *Lookup { return NewLookup("ml", names) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				n := 0
				s.LatestEach(bc.lookup(), signal.SourceInference, t0, 15*time.Second, func(int, *Sample) { n++ })
				if n != len(names) {
					b.Fatalf("%d fresh, want %d", n, len(names))
				}
			}
		})
	}
}

// TestWindowRun: the binary search finds what reading every sample finds,
// over random windows with gaps in the TTFT and wrapped rings.
func TestWindowRun(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 5000 {
		capacity := 2 + rng.IntN(10)
		var w window
		at := t0
		for range rng.IntN(3 * capacity) {
			at = at.Add(time.Duration(1+rng.IntN(5)) * time.Second)
			p := point{time: at.UnixNano()}
			if rng.IntN(4) > 0 {
				p.hists[signal.HistTTFT].h = pack(hist(1, 2, 3), nil)
			}
			w.push(p, capacity)
		}
		from := t0.Add(time.Duration(rng.IntN(60)) * time.Second)
		to := from.Add(time.Duration(rng.IntN(60)) * time.Second)

		wantFirst, wantLast, count := -1, -1, 0
		for i := 0; i < w.n; i++ {
			if p := w.at(i); p.Time().After(from) && !p.Time().After(to) && p.hists[signal.HistTTFT].h != nil {
				if wantFirst < 0 {
					wantFirst = i
				}
				wantLast = i
				count++
			}
		}
		first, last, ok := w.run(signal.HistTTFT, from, to)
		if ok != (count >= 2) || ok && (first != wantFirst || last != wantLast) {
			t.Fatalf("run(%v, %v) over %d samples = %d, %d, %v; want %d, %d (%d with TTFT)",
				from.Sub(t0), to.Sub(t0), w.n, first, last, ok, wantFirst, wantLast, count)
		}
	}
}

// TestInvalidTTFTDropped: a histogram that fails validation is dropped when
// the sample is stored, its scalars kept; the window's increase is then
// taken over the valid samples around it.
func TestInvalidTTFTDropped(t *testing.T) {
	for _, bad := range []*histogram.Histogram{
		{Bounds: []float64{0.1, 1, math.Inf(1)}, Counts: []float64{1, math.NaN(), 3}, Count: 3},
		{Bounds: []float64{0.1, 1, 2}, Counts: []float64{1, 2, 3}, Count: 3},
		{Bounds: []float64{1, 0.1, math.Inf(1)}, Counts: []float64{1, 2, 3}, Count: 3},
		{Bounds: []float64{0.1, math.Inf(1)}, Counts: []float64{1, 2, 3}, Count: 3},
	} {
		s := New(8)
		k := Key{"ns", "p"}
		s.PutPod(k, signal.SourceInference, sample(t0, 1, hist(1, 2, 3)))
		s.PutPod(k, signal.SourceInference, sample(t0.Add(5*time.Second), 2, bad))
		s.PutPod(k, signal.SourceInference, sample(t0.Add(10*time.Second), 3, hist(2, 4, 6)))
		smp, ok := s.Latest(k, signal.SourceInference, t0.Add(10*time.Second), time.Minute)
		if !ok {
			t.Fatal("no newest sample")
		}
		if q, _ := smp.Get(signal.QueueDepth); q != 3 {
			t.Errorf("newest queue %v, want 3", q)
		}
		s.PutPod(k, signal.SourceInference, sample(t0.Add(15*time.Second), 4, bad))
		if smp, _ := s.Latest(k, signal.SourceInference, t0.Add(15*time.Second), time.Minute); smp.TTFT != nil {
			t.Errorf("%v: kept", bad)
		}
		inc, ok := s.TTFTIncrease(k, t0.Add(15*time.Second), time.Minute, time.Minute)
		if !ok || inc.Count <= 0 {
			t.Errorf("%v: increase %v, %v; want the valid samples' increase", bad, inc, ok)
		}
	}
}

// TestTTFTLayoutChange: a server redeployed with other buckets has no TTFT
// increase while both layouts are in the window, and has one again once
// the old layout has left it.
func TestTTFTLayoutChange(t *testing.T) {
	s := New(30)
	k := Key{"ns", "p"}
	other := func(c ...float64) *histogram.Histogram {
		return &histogram.Histogram{Bounds: []float64{0.5, math.Inf(1)}, Counts: c, Count: c[len(c)-1]}
	}
	for i := range 4 {
		s.PutPod(k, signal.SourceInference, sample(t0.Add(time.Duration(i)*10*time.Second), 0, hist(float64(i), float64(2*i), float64(3*i))))
	}
	for i := range 4 {
		s.PutPod(k, signal.SourceInference, sample(t0.Add(time.Duration(4+i)*10*time.Second), 0, other(float64(i), float64(3*i))))
	}
	for _, tc := range []struct {
		at   time.Duration
		want bool
	}{
		{35 * time.Second, true},  // 10..30: the first layout only
		{55 * time.Second, false}, // 30..50: both
		{75 * time.Second, true},  // 50..70: the second only
	} {
		inc, ok := s.TTFTIncrease(k, t0.Add(tc.at), 30*time.Second, time.Minute)
		if ok != tc.want {
			t.Errorf("at %v: ok = %v, want %v", tc.at, ok, tc.want)
			continue
		}
		if ok {
			inc.Bounds[0] = -1 // the caller's own copy
		}
	}
	smp, _ := s.Latest(k, signal.SourceInference, t0.Add(70*time.Second), time.Minute)
	if smp.TTFT.Bounds[0] != 0.5 {
		t.Errorf("a caller's change reached the stored histogram: %v", smp.TTFT.Bounds)
	}
}

// TestTTFTRetention: a store that drops histograms older than the TTFT
// window answers every TTFT increase, at any time from the newest sample
// on, exactly as one that keeps them all, while holding fewer histograms.
func TestTTFTRetention(t *testing.T) {
	const win = 30 * time.Second
	rng := rand.New(rand.NewPCG(5, 6))
	for series := range 200 {
		all, trimmed := New(30), New(30, WithTTFTRetention(win))
		k := Key{"ns", "p"}
		at := t0
		c := []float64{0, 0, 0}
		for range 5 + rng.IntN(25) {
			at = at.Add(time.Duration(1+rng.IntN(10)) * time.Second)
			var h *histogram.Histogram
			if rng.IntN(5) > 0 {
				if rng.IntN(8) == 0 {
					c = []float64{0, 0, 0} // restart
				}
				c[0] += float64(rng.IntN(3))
				c[1] = c[0] + float64(rng.IntN(3))
				c[2] = c[1] + float64(rng.IntN(3))
				h = hist(c...)
			}
			for _, st := range []*Store{all, trimmed} {
				var hh *histogram.Histogram
				if h != nil {
					hh = hist(slices.Clone(h.Counts)...)
				}
				st.PutPod(k, signal.SourceInference, sample(at, 1, hh))
			}
			for _, d := range []time.Duration{0, time.Second, 7 * time.Second, 29 * time.Second} {
				now := at.Add(d)
				want, wantOK := all.TTFTIncrease(k, now, win, time.Minute)
				got, gotOK := trimmed.TTFTIncrease(k, now, win, time.Minute)
				if gotOK != wantOK || gotOK && (!slices.Equal(got.Counts, want.Counts) || got.Count != want.Count) {
					t.Fatalf("series %d at %v+%v: trimmed %v (%v), all %v (%v)", series, at.Sub(t0), d, got, gotOK, want, wantOK)
				}
			}
		}
		held := func(st *Store) int {
			n := 0
			w := &st.entry(k).windows[signal.SourceInference]
			for i := 0; i < w.n; i++ {
				if w.at(i).hists[signal.HistTTFT].h != nil {
					n++
				}
			}
			return n
		}
		if held(trimmed) > held(all) {
			t.Fatalf("series %d: trimmed store holds %d histograms, the other %d", series, held(trimmed), held(all))
		}
		w := &trimmed.entry(k).windows[signal.SourceInference]
		for i := 0; i < w.n-1; i++ {
			if p := w.at(i); p.hists[signal.HistTTFT].h != nil && !p.Time().After(w.newest().Time().Add(-win)) {
				t.Fatalf("series %d: a histogram %v before the newest sample kept", series, w.newest().Time().Sub(p.Time()))
			}
		}
	}
}
