package store

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// TestHistogramKindsKeptApart: a pod's TTFT and ITL histograms, of
// different layouts and present in different scrapes, each give the
// increase PromQL would over their own series, with a reset in one and not
// the other, and neither is seen through the other.
func TestHistogramKindsKeptApart(t *testing.T) {
	itlBounds := []float64{0.01, 0.025, 0.05, 0.1, math.Inf(1)}
	itl := func(c ...float64) *histogram.Histogram {
		return &histogram.Histogram{Bounds: itlBounds, Counts: c, Count: c[len(c)-1], Sum: c[len(c)-1] * 0.03}
	}
	s := New(40)
	k := Key{"ns", "p"}
	var ttfts, itls []histogram.Sample
	for i := range 20 {
		at := t0.Add(time.Duration(i) * 5 * time.Second)
		smp := Sample{Time: at}
		if i%3 != 2 { // TTFT missing from every third scrape
			smp.TTFT = hist(float64(i), float64(2*i), float64(3*i))
			ttfts = append(ttfts, histogram.Sample{T: at, H: smp.TTFT})
		}
		if i >= 4 { // ITL from the fifth scrape, reset at the twelfth
			n := float64(i - 4)
			if i >= 12 {
				n = float64(i - 12)
			}
			smp.ITL = itl(10*n, 30*n, 50*n, 60*n, 61*n)
			itls = append(itls, histogram.Sample{T: at, H: smp.ITL})
		}
		s.PutPod(k, signal.SourceInference, smp)
	}
	for _, tc := range []struct {
		kind    signal.Hist
		samples []histogram.Sample
	}{{signal.HistTTFT, ttfts}, {signal.HistITL, itls}} {
		for at := 30 * time.Second; at <= 100*time.Second; at += 1500 * time.Millisecond {
			now := t0.Add(at)
			got, ok := s.HistIncrease(k, tc.kind, now, 30*time.Second, time.Minute)
			want, err := histogram.ExtrapolatedIncrease(tc.samples, now, 30*time.Second)
			if ok != (err == nil) {
				t.Fatalf("%v at %v: store ok=%v, PromQL err=%v", tc.kind, at, ok, err)
			}
			if !ok {
				continue
			}
			if !histogram.SameBounds(got, want) {
				t.Fatalf("%v at %v: bounds %v, want %v", tc.kind, at, got.Bounds, want.Bounds)
			}
			for i := range want.Counts {
				if math.Abs(got.Counts[i]-want.Counts[i]) > 1e-9 {
					t.Fatalf("%v at %v bucket %d: %v, want %v", tc.kind, at, i, got.Counts[i], want.Counts[i])
				}
			}
		}
	}
	if _, ok := s.HistIncrease(k, signal.NumHists, t0.Add(time.Minute), time.Minute, time.Minute); ok {
		t.Error("an unknown kind gave an increase")
	}
	cov := s.PodCoverage(t0.Add(95*time.Second), 10*time.Second)
	if cov[int(signal.NumSignals)+int(signal.HistITL)].Fresh != 1 || cov[int(signal.NumSignals)+int(signal.HistTTFT)].Fresh != 1 {
		t.Errorf("coverage: TTFT %d, ITL %d pods, want 1 and 1", cov[int(signal.NumSignals)+int(signal.HistTTFT)].Fresh, cov[int(signal.NumSignals)+int(signal.HistITL)].Fresh)
	}
}

// TestInvalidITLDropped: an ITL histogram that fails CheckTTFT is not kept,
// and the sample's other values are.
func TestInvalidITLDropped(t *testing.T) {
	s := New(4)
	k := Key{"ns", "p"}
	bad := hist(5, 2, 7) // decreasing cumulative counts
	smp := sample(t0, 3, nil)
	smp.ITL = bad
	s.PutPod(k, signal.SourceInference, smp)
	got, ok := s.Latest(k, signal.SourceInference, t0, time.Second)
	if !ok || got.ITL != nil {
		t.Fatalf("stored ITL %v, want none", got.ITL)
	}
	if v, _ := got.Get(signal.QueueDepth); v != 3 {
		t.Fatalf("queue %v, want 3", v)
	}
}

// TestNewestHistogramsFromTheWindow: the newest sample's TTFT and ITL are
// kept once, in the window, yet Latest and LatestHistEach give them back
// equal to what was put, packed or not, and coverage counts them; a sample
// without them gives none back.
func TestNewestHistogramsFromTheWindow(t *testing.T) {
	itl := func(n float64) *histogram.Histogram {
		return &histogram.Histogram{Bounds: []float64{0.05, math.Inf(1)}, Counts: []float64{n, 2 * n}, Count: 2 * n, Sum: n / 10}
	}
	s := New(8)
	k := Key{"ns", "p"}
	for i := range 4 {
		smp := Sample{Time: t0.Add(time.Duration(i) * 5 * time.Second), TTFT: hist(float64(i), float64(2*i), float64(3*i)), ITL: itl(float64(10 * i))}
		if i == 2 {
			smp.TTFT = hist(0.5, 1, 1) // fractional: kept whole, not packed
		}
		s.PutPod(k, signal.SourceInference, smp)
		now := smp.Time
		if held := s.pods["ns"].latest[signal.SourceInference][0]; held.TTFT != nil || held.ITL != nil {
			t.Fatalf("scrape %d: the newest sample keeps its own copy of its histograms", i)
		}
		got, ok := s.Latest(k, signal.SourceInference, now, time.Second)
		if !ok {
			t.Fatalf("scrape %d: no newest sample", i)
		}
		var each [signal.NumHists]*histogram.Histogram
		for kind := range signal.NumHists {
			s.LatestHistEach(NewLookup("ns", []string{"p"}), signal.SourceInference, kind, now, time.Second, func(_ int, _ *Sample, h *histogram.Histogram) {
				each[kind] = h
			})
		}
		for kind, want := range map[signal.Hist]*histogram.Histogram{signal.HistTTFT: smp.TTFT, signal.HistITL: smp.ITL} {
			for name, h := range map[string]*histogram.Histogram{"Latest": got.Hist(kind), "LatestHistEach": each[kind]} {
				if h == nil || !histogram.SameBounds(h, want) || !slices.Equal(h.Counts, want.Counts) || h.Sum != want.Sum || h.Count != want.Count {
					t.Fatalf("scrape %d: %s's %v = %+v, want %+v", i, name, kind, h, want)
				}
			}
		}
		if cov := s.PodCoverage(now, time.Second); cov[int(signal.NumSignals)+int(signal.HistITL)].Fresh != 1 {
			t.Fatalf("scrape %d: ITL coverage %+v", i, cov[int(signal.NumSignals)+int(signal.HistITL)])
		}
	}
	bare := Sample{Time: t0.Add(time.Minute)}
	s.PutPod(k, signal.SourceInference, bare)
	if got, _ := s.Latest(k, signal.SourceInference, bare.Time, time.Second); got.TTFT != nil || got.ITL != nil {
		t.Fatal("a sample without histograms gives back its predecessor's")
	}
	s.LatestHistEach(NewLookup("ns", []string{"p"}), signal.SourceInference, signal.HistTTFT, bare.Time, time.Second, func(int, *Sample, *histogram.Histogram) {
		t.Fatal("LatestHistEach gives a histogram the newest sample lacks")
	})
}
