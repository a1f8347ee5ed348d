package histogram

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestIncreaseBetween: for every window of random series with restarts
// (whole or single buckets dropping), the increase from the two end
// samples and their running reset totals is WindowIncrease of the
// window's samples.
func TestIncreaseBetween(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	bounds := []float64{0.1, 0.5, 1, 5, math.Inf(1)}
	for series := range 300 {
		n := 2 + rng.IntN(20)
		hs := make([]*Histogram, n)
		resets := make([]*Resets, n)
		per := make([]float64, len(bounds))
		var sum float64
		for k := range hs {
			switch r := rng.IntN(10); {
			case k > 0 && r == 0: // the server restarted
				clear(per)
				sum = 0
			case k > 0 && r == 1: // one bucket drops, as a non-atomic read can make it
				per[rng.IntN(len(per))] /= 2
			}
			for i := range per {
				per[i] += float64(rng.IntN(5))
			}
			sum += rng.Float64() * 10
			h := &Histogram{Bounds: bounds, Counts: make([]float64, len(bounds)), Sum: sum}
			c := 0.0
			for i := range per {
				c += per[i]
				h.Counts[i] = c
			}
			h.Count = c
			hs[k] = h
			if k > 0 {
				resets[k] = NextResets(resets[k-1], hs[k-1], h)
			}
		}
		var scratch Histogram
		for i := 0; i < n; i++ {
			for j := i + 1; j < n; j++ {
				want, err := WindowIncrease(hs[i : j+1])
				if err != nil {
					t.Fatal(err)
				}
				got := IncreaseBetween(&scratch, hs[i], hs[j], resets[i], resets[j])
				for b := range want.Counts {
					if !near(got.Counts[b], want.Counts[b]) {
						t.Fatalf("series %d window %d..%d bucket %d: %v, want %v", series, i, j, b, got.Counts[b], want.Counts[b])
					}
				}
				if !near(got.Sum, want.Sum) || !near(got.Count, want.Count) {
					t.Fatalf("series %d window %d..%d: sum %v count %v, want %v %v", series, i, j, got.Sum, got.Count, want.Sum, want.Count)
				}
			}
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestNextResetsShares: a step without a drop allocates nothing.
func TestNextResetsShares(t *testing.T) {
	a := &Histogram{Bounds: []float64{1, math.Inf(1)}, Counts: []float64{1, 2}, Count: 2, Sum: 3}
	b := &Histogram{Bounds: []float64{1, math.Inf(1)}, Counts: []float64{2, 4}, Count: 4, Sum: 5}
	if r := NextResets(nil, a, b); r != nil {
		t.Errorf("no drop from nil: %+v", r)
	}
	r := NextResets(nil, b, a)
	if r == nil || r.Counts[0] != 2 || r.Counts[1] != 4 || r.Count != 4 || r.Sum != 5 {
		t.Fatalf("drop: %+v", r)
	}
	if NextResets(r, a, b) != r {
		t.Error("no drop: the totals must be shared")
	}
	if allocs := testing.AllocsPerRun(100, func() { NextResets(r, a, b) }); allocs != 0 {
		t.Errorf("%v allocations without a drop", allocs)
	}
}
