package histogram

import (
	"math"
	"testing"
)

var inf = math.Inf(+1)

func TestQuantile(t *testing.T) {
	layout := []float64{0.1, 0.5, 1, inf}
	tests := []struct {
		name   string
		q      float64
		bounds []float64
		counts []float64
		want   float64
	}{
		{"NaN q", math.NaN(), layout, []float64{10, 50, 90, 100}, math.NaN()},
		{"negative q", -0.1, layout, []float64{10, 50, 90, 100}, math.Inf(-1)},
		{"q above 1", 1.1, layout, []float64{10, 50, 90, 100}, math.Inf(+1)},
		{"q above 1 beats empty histogram", 2, nil, nil, math.Inf(+1)},
		{"no buckets", 0.5, nil, nil, math.NaN()},
		{"only +Inf bucket", 0.5, []float64{inf}, []float64{4}, math.NaN()},
		{"no +Inf bucket", 0.5, []float64{0.1, 0.5}, []float64{1, 2}, math.NaN()},
		{"no observations", 0.5, layout, []float64{0, 0, 0, 0}, math.NaN()},
		{"lengths differ", 0.5, layout, []float64{1, 2}, math.NaN()},
		{"NaN bound", 0.5, []float64{math.NaN(), 1, inf}, []float64{1, 2, 3}, math.NaN()},
		{"interpolate in middle bucket", 0.3, layout, []float64{10, 50, 90, 100}, 0.3},
		{"rank on bucket boundary", 0.5, layout, []float64{10, 50, 90, 100}, 0.5},
		{"first bucket from zero", 0.05, layout, []float64{10, 50, 90, 100}, 0.05},
		{"rank in +Inf bucket gives highest finite bound", 0.95, layout, []float64{10, 50, 90, 100}, 1},
		{"q=1 with observations above last bound", 1, layout, []float64{10, 50, 90, 100}, 1},
		{"q=1 reaches last finite bound", 1, layout, []float64{10, 50, 100, 100}, 1},
		{"q=0 lands at zero", 0, layout, []float64{10, 50, 90, 100}, 0},
		// PromQL interpolates 0 + 0.1*(0/0) here.
		{"q=0 with empty first bucket is NaN", 0, layout, []float64{0, 50, 90, 100}, math.NaN()},
		{"q=0 skips nothing after an empty bucket", 0, []float64{0.1, 0.5, inf}, []float64{0, 0, 5}, math.NaN()},
		{"first bound zero returned as is", 0.2, []float64{0, 1, inf}, []float64{5, 10, 10}, 0},
		{"negative first bound returned as is", 0.2, []float64{-1, 1, inf}, []float64{5, 10, 10}, -1},
		{"interpolate across zero", 0.75, []float64{-1, 1, inf}, []float64{5, 10, 10}, 0},
		{"decreasing counts forced monotonic", 0.5, []float64{1, 2, inf}, []float64{10, 8, 10}, 0.5},
		// 1e-11 on 100 is below the 1e-12 relative tolerance: flattened,
		// so rank 100 is reached in the first bucket. Unflattened it would
		// be 2.
		{"tiny deltas ignored", 1, []float64{1, 2, inf}, []float64{100, 100 + 1e-11, 100 + 1e-11}, 1},
		{"unsorted bounds sorted", 0.5, []float64{2, 1, inf}, []float64{10, 5, 10}, 1},
		{"equal bounds coalesced", 0.5, []float64{1, 1, inf}, []float64{2, 3, 5}, 0.5},
		{"duplicate +Inf leaves one bucket", 0.5, []float64{inf, inf}, []float64{2, 3}, math.NaN()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &Histogram{Bounds: tt.bounds, Counts: tt.counts}
			before := h.Clone()
			got := Quantile(tt.q, h)
			if !sameFloat(got, tt.want, 1e-12) {
				t.Errorf("Quantile(%g) = %g, want %g", tt.q, got, tt.want)
			}
			if !equalHist(h, before) {
				t.Errorf("Quantile modified its input: %+v, was %+v", h, before)
			}
		})
	}
}

func TestQuantileNil(t *testing.T) {
	if got := Quantile(0.5, nil); !math.IsNaN(got) {
		t.Errorf("Quantile(nil) = %g, want NaN", got)
	}
}

func TestQuantileScaleInvariant(t *testing.T) {
	h := &Histogram{Bounds: []float64{0.1, 0.25, 0.5, 1, 2.5, inf}, Counts: []float64{3, 17, 40, 71, 89, 93}}
	for _, q := range []float64{0.1, 0.5, 0.9, 0.99} {
		scaled := h.Clone()
		for i := range scaled.Counts {
			scaled.Counts[i] /= 60
		}
		if a, b := Quantile(q, h), Quantile(q, scaled); !sameFloat(a, b, 1e-12) {
			t.Errorf("q=%g: quantile of increase %g != quantile of rate %g", q, a, b)
		}
	}
}

// sameFloat compares with a relative tolerance and treats NaN as equal to
// NaN.
func sameFloat(a, b, tol float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	if a == b {
		return true
	}
	return math.Abs(a-b) <= tol*math.Max(math.Abs(a), math.Abs(b))
}

func equalHist(a, b *Histogram) bool {
	if len(a.Bounds) != len(b.Bounds) || len(a.Counts) != len(b.Counts) {
		return false
	}
	for i := range a.Bounds {
		if !sameFloat(a.Bounds[i], b.Bounds[i], 0) {
			return false
		}
	}
	for i := range a.Counts {
		if !sameFloat(a.Counts[i], b.Counts[i], 0) {
			return false
		}
	}
	return sameFloat(a.Sum, b.Sum, 0) && sameFloat(a.Count, b.Count, 0)
}
