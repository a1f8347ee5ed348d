package store

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

func TestPackUnpack(t *testing.T) {
	base := hist(10, 20, 30)
	base.Sum = 4.5
	tests := []struct {
		name       string
		h, base    *histogram.Histogram
		wantPacked bool
	}{
		{"no base", hist(1, 2, 3), nil, false},
		{"grown by a few", hist(12, 25, 31), base, true},
		{"unchanged", hist(10, 20, 30), base, true},
		{"grown by the most 16 bits hold", hist(10+math.MaxUint16, 20, 30), base, true},
		{"grown by more", hist(10+math.MaxUint16+1, 20+math.MaxUint16+1, 30+math.MaxUint16+1), base, false},
		{"a count fell: restart", hist(9, 20, 30), base, false},
		{"a count not an integer", hist(10.5, 20, 30), base, false},
		{"other layout", hist(10, 20, 30, 40), base, false},
		{"large integers", hist(1<<52+3, 1<<52+9, 1<<52+9), hist(1<<52, 1<<52, 1<<52), true},
		{"more buckets than packed", hist(make([]float64, maxPackedBuckets+1)...), hist(make([]float64, maxPackedBuckets+1)...), false},
		{"as many buckets as packed", hist(make([]float64, maxPackedBuckets)...), hist(make([]float64, maxPackedBuckets)...), true},
		{"count not the +Inf bucket's", withCount(hist(12, 25, 31), 40), base, false},
		{"base's count not its +Inf bucket's", hist(12, 25, 31), withCount(hist(10, 20, 30), 29), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.h.Sum = 7.25
			want := &histogram.Histogram{Bounds: tt.h.Bounds, Counts: slices.Clone(tt.h.Counts), Sum: tt.h.Sum, Count: tt.h.Count}
			p := pack(tt.h, tt.base)
			if packed := p.base == tt.base && tt.base != tt.h; packed != tt.wantPacked {
				t.Fatalf("packed against the base: %v, want %v", packed, tt.wantPacked)
			}
			if !tt.wantPacked && p.base != tt.h {
				t.Fatal("a histogram not packed is not its own base")
			}
			got := p.unpack(&histogram.Histogram{Counts: make([]float64, 1)})
			if !slices.Equal(got.Counts, want.Counts) || got.Sum != want.Sum || got.Count != want.Count || !slices.Equal(got.Bounds, want.Bounds) {
				t.Errorf("unpacked %+v, want %+v", got, want)
			}
		})
	}
}

// withCount returns h with its count set apart from its +Inf bucket's.
func withCount(h *histogram.Histogram, count float64) *histogram.Histogram {
	h.Count = count
	return h
}

// TestPackedHistSize: a packed histogram is one of Go's 64-byte size
// classes; at 10,000 pods, 14 samples and two kinds, 16 bytes more is 4
// MiB.
func TestPackedHistSize(t *testing.T) {
	if n := unsafe.Sizeof(packedHist{}); n != 64 {
		t.Errorf("packedHist is %d bytes, want 64", n)
	}
}

// TestTTFTPackedMatchesPromQL checks the store's TTFT increases, whatever
// mix of packed and full histograms its windows hold, against PromQL's
// formula over the same samples: series that grow slowly (packed), jump
// past 16 bits, restart, carry fractional counts, or skip the histogram.
func TestTTFTPackedMatchesPromQL(t *testing.T) {
	const win = 40 * time.Second
	rng := rand.New(rand.NewPCG(7, 8))
	for series := range 300 {
		s := New(64)
		k := Key{"ns", "p"}
		var all []histogram.Sample
		at := t0
		c := []float64{0, 0, 0}
		for range 2 + rng.IntN(40) {
			at = at.Add(time.Duration(500+rng.IntN(9500)) * time.Millisecond)
			if rng.IntN(6) == 0 {
				s.PutPod(k, signal.SourceInference, sample(at, 0, nil))
				continue
			}
			step := func() float64 { return float64(rng.IntN(4)) }
			switch rng.IntN(10) {
			case 0:
				c = []float64{0, 0, 0} // restart
			case 1:
				step = func() float64 { return float64(40000 + rng.IntN(60000)) }
			case 2:
				step = func() float64 { return rng.Float64() * 3 }
			}
			c[0] += step()
			c[1] = max(c[1]+step(), c[0])
			c[2] = max(c[2]+step(), c[1])
			h := hist(slices.Clone(c)...)
			h.Sum = c[2] * 0.3
			s.PutPod(k, signal.SourceInference, sample(at, 0, h))
			all = append(all, histogram.Sample{T: at, H: hist(slices.Clone(c)...)})
			all[len(all)-1].H.Sum = h.Sum
		}
		for range 20 {
			now := t0.Add(time.Duration(rng.Int64N(int64(at.Sub(t0) + 5*time.Second))))
			got, ok := s.TTFTIncrease(k, now, win, time.Hour)
			var inWin []histogram.Sample
			for _, smp := range all {
				if !smp.T.After(now) {
					inWin = append(inWin, smp)
				}
			}
			want, err := histogram.ExtrapolatedIncrease(inWin, now, win)
			if ok != (err == nil) {
				t.Fatalf("series %d at %v: store ok=%v, PromQL err=%v", series, now.Sub(t0), ok, err)
			}
			if !ok {
				continue
			}
			for i := range want.Counts {
				if d := math.Abs(got.Counts[i] - want.Counts[i]); d > 1e-9*max(1, math.Abs(want.Counts[i])) {
					t.Fatalf("series %d at %v bucket %d: %v, want %v", series, now.Sub(t0), i, got.Counts[i], want.Counts[i])
				}
			}
			if d := math.Abs(got.Count - want.Count); d > 1e-9*max(1, math.Abs(want.Count)) {
				t.Fatalf("series %d at %v: count %v, want %v", series, now.Sub(t0), got.Count, want.Count)
			}
		}
	}
}
