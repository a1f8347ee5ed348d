package histogram

import "slices"

// Resets holds, for one histogram series since some start, the running
// totals of what each counter (bucket, Sum, Count) had counted just before
// each of its drops. PromQL's increase over a range is last - first plus
// the value before every drop inside it; with these totals kept beside
// every sample, that is last - first + (totals at last - totals at first),
// an answer for any window from its two end samples instead of a pass over
// all of them (see IncreaseBetween).
//
// The nil *Resets stands for all zeros. A Resets is never modified once
// made, so consecutive samples share one until a counter drops.
type Resets struct {
	Counts     []float64
	Sum, Count float64
}

func (r *Resets) count(i int) float64 {
	if r == nil {
		return 0
	}
	return r.Counts[i]
}

func (r *Resets) sum() float64 {
	if r == nil {
		return 0
	}
	return r.Sum
}

func (r *Resets) total() float64 {
	if r == nil {
		return 0
	}
	return r.Count
}

// NextResets returns the totals after the step from prev to cur, two
// consecutive samples of a series with the same bounds (SameBounds): r
// itself when no counter dropped, so a series that never restarts
// allocates nothing.
func NextResets(r *Resets, prev, cur *Histogram) *Resets {
	dropped := cur.Sum < prev.Sum || cur.Count < prev.Count
	for i, c := range cur.Counts {
		dropped = dropped || c < prev.Counts[i]
	}
	if !dropped {
		return r
	}
	next := &Resets{Counts: make([]float64, len(cur.Counts))}
	if r != nil {
		copy(next.Counts, r.Counts)
		next.Sum, next.Count = r.Sum, r.Count
	}
	addDrops(next.Counts, &next.Sum, &next.Count, prev, cur)
	return next
}

// IncreaseBetween writes into dst the WindowIncrease of the samples of a
// series from first to last, given the running reset totals at each
// (NextResets applied over every step between them), and returns dst. The
// caller guarantees what WindowIncrease checks: valid samples, one bucket
// layout. dst's Counts are reused and its Bounds point at last's, so that
// thousands of windows in a row need one scratch histogram.
func IncreaseBetween(dst, first, last *Histogram, atFirst, atLast *Resets) *Histogram {
	dst.Bounds = last.Bounds
	dst.Counts = slices.Grow(dst.Counts[:0], len(last.Counts))[:len(last.Counts)]
	for i, c := range last.Counts {
		dst.Counts[i] = c - first.Counts[i] + (atLast.count(i) - atFirst.count(i))
	}
	dst.Sum = last.Sum - first.Sum + (atLast.sum() - atFirst.sum())
	dst.Count = last.Count - first.Count + (atLast.total() - atFirst.total())
	return dst
}

// SameBounds reports whether a and b have identical bucket layouts.
func SameBounds(a, b *Histogram) bool { return sameBounds(a, b) }
