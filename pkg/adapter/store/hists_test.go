package store

import (
	"math"
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
