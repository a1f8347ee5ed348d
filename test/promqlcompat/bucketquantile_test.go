package promqlcompat

import (
	"math"
	"testing"

	"github.com/prometheus/prometheus/promql"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// FuzzBucketQuantile compares histogram.Quantile with PromQL's own
// BucketQuantile on arbitrary buckets: unsorted, repeated or non-positive
// bounds, decreasing counts, deltas within the 1e-12 tolerance.
func FuzzBucketQuantile(f *testing.F) {
	f.Add(0.9, []byte{3, 10, 1, 4, 7, 9, 255, 9})
	f.Add(0.5, []byte{1, 10, 1, 8, 255, 10})          // decreasing count
	f.Add(1.0, []byte{2, 200, 4, 201, 255, 201})      // tiny deltas
	f.Add(0.0, []byte{0, 0, 1, 20, 255, 20})          // bound 0, empty first bucket
	f.Add(0.25, []byte{5, 3, 5, 4, 2, 1, 255, 12})    // repeated, unsorted bounds
	f.Add(0.75, []byte{128, 2, 130, 6, 255, 6, 0, 0}) // negative bounds
	f.Fuzz(func(t *testing.T, q float64, raw []byte) {
		var h histogram.Histogram
		var buckets promql.Buckets
		for i := 0; i+1 < len(raw) && i < 64; i += 2 {
			le := leFrom(raw[i])
			// The low two bits of the count byte scale it by up to 3e-13:
			// neighbours differing only there are within PromQL's 1e-12
			// tolerance for floating-point noise.
			c := float64(raw[i+1]>>2) * (1 + float64(raw[i+1]&3)*1e-13)
			h.Bounds = append(h.Bounds, le)
			h.Counts = append(h.Counts, c)
			buckets = append(buckets, promql.Bucket{UpperBound: le, Count: c})
		}
		got := histogram.Quantile(q, &h)
		want := math.NaN()
		if len(buckets) > 0 {
			want, _, _, _, _, _ = promql.BucketQuantile(q, buckets)
		} else if q < 0 {
			want = math.Inf(-1)
		} else if q > 1 {
			want = math.Inf(+1)
		}
		if !same(got, want) {
			t.Fatalf("q=%g buckets %v %v: Quantile %g, BucketQuantile %g", q, h.Bounds, h.Counts, got, want)
		}
	})
}

// leFrom maps a byte to a bound: 255 is +Inf, 128..254 negative, the rest
// positive, in steps coarse enough to repeat.
func leFrom(b byte) float64 {
	switch {
	case b == 255:
		return math.Inf(+1)
	case b >= 128:
		return -float64(b-127) / 4
	}
	return float64(b) / 4
}
