package store

import (
	"math"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/pkg/histogram"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func sample(at time.Time, queue float64, ttft *histogram.Histogram) Sample {
	s := Sample{Time: at, TTFT: ttft}
	s.Set(QueueDepth, queue)
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
	if _, ok := s.Latest(k, SourceInference, t0, time.Second); ok {
		t.Fatal("empty store has a sample")
	}
	s.PutPod(k, SourceInference, sample(t0, 3, nil))
	s.PutPod(k, SourceInference, sample(t0.Add(-time.Second), 99, nil)) // out of order: dropped
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
		smp, ok := s.Latest(k, SourceInference, tc.now, tc.maxAge)
		if ok != tc.ok {
			t.Fatalf("now=%v: ok=%v want %v", tc.now, ok, tc.ok)
		}
		if v, _ := smp.Get(QueueDepth); ok && v != 3 {
			t.Fatalf("value %v, want 3 (the out-of-order sample must be dropped)", v)
		}
	}
	if _, ok := s.Latest(k, SourceGPU, t0, time.Minute); ok {
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
		s.PutPod(k, SourceInference, sample(at, float64(i), h))
		if i >= 7 {
			kept = append(kept, histogram.Sample{T: at, H: h})
		}
	}
	now := t0.Add(45 * time.Second)
	if smp, _ := s.Latest(k, SourceInference, now, time.Minute); smp.values[QueueDepth] != 9 {
		t.Fatalf("latest = %v, want 9", smp.values[QueueDepth])
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
		s.PutPod(k, SourceInference, sample(at, 0, h))
		all = append(all, histogram.Sample{T: at, H: h})
	}
	for _, at := range []time.Duration{26 * time.Second, 27 * time.Second, 40 * time.Second} {
		now := t0.Add(at)
		for pass := 0; pass < 2; pass++ { // the second pass hits the memo
			got, ok := s.TTFTIncrease(k, now, 20*time.Second, time.Minute)
			want, err := histogram.ExtrapolatedIncrease(all, now, 20*time.Second)
			if !ok || err != nil {
				t.Fatalf("at %v: ok=%v err=%v", at, ok, err)
			}
			for i := range want.Counts {
				if math.Abs(got.Counts[i]-want.Counts[i]) > 1e-9 {
					t.Fatalf("at %v pass %d bucket %d: %v, want %v", at, pass, i, got.Counts[i], want.Counts[i])
				}
			}
		}
	}
	if _, ok := s.TTFTIncrease(k, t0.Add(10*time.Minute), 20*time.Second, time.Minute); ok {
		t.Fatal("stale pod must give no increase")
	}
}

func TestForgetAndCoverage(t *testing.T) {
	s := New(4)
	s.PutPod(Key{"ns", "old"}, SourceInference, sample(t0, 1, nil))
	s.PutPod(Key{"ns", "new"}, SourceInference, sample(t0.Add(time.Minute), 1, hist(1, 1, 1)))
	var n Sample
	n.Time = t0
	n.Set(GPUUtilization, 50)
	s.PutNode("node", n)
	cov := s.PodCoverage(t0.Add(time.Minute), 10*time.Second)
	if cov[QueueDepth].Fresh != 1 || cov[NumSignals].Fresh != 1 || cov[GPUUtilization].Fresh != 0 {
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
	s.PutPod(Key{"ns", "fresh"}, SourceInference, sample(t0, 5, nil))
	s.PutPod(Key{"ns", "stale"}, SourceInference, sample(t0.Add(-time.Minute), 6, nil))
	s.PutPod(Key{"other", "fresh"}, SourceInference, sample(t0, 7, nil))
	s.PutPod(Key{"ns", "gpu-only"}, SourceGPU, sample(t0, 8, nil))
	names := []string{"fresh", "stale", "missing", "gpu-only"}
	got := map[int]float64{}
	s.LatestEach("ns", len(names), func(i int) string { return names[i] }, SourceInference, t0, 10*time.Second, func(i int, smp *Sample) {
		got[i], _ = smp.Get(QueueDepth)
	})
	if len(got) != 1 || got[0] != 5 {
		t.Fatalf("got %v, want only the fresh pod of namespace ns (index 0, value 5)", got)
	}
	s.LatestEach("absent", len(names), func(i int) string { return names[i] }, SourceInference, t0, time.Hour, func(int, *Sample) {
		t.Fatal("no pod in an unknown namespace")
	})
}
