package histogram

import (
	"fmt"
	"slices"
)

// Merge adds up histograms, e.g. the TTFT histograms of every replica of a
// workload. Count and Sum add up as well.
//
// When all layouts are identical the result is exactly PromQL's
// sum by (le) (x_bucket). When they differ, the result is laid out on the
// union of all bounds, and every input contributes at each union bound the
// cumulative count of its own largest bound not above it (cumulative counts
// are step functions of the bound, so this is what the input certainly
// counted up to there). That is where Merge departs from PromQL: sum by (le)
// adds only series whose le values are identical, so a bound present in some
// inputs gets only their counts, the result is not monotonic, and
// histogram_quantile then papers over it by forcing monotonicity, which
// biases the quantile. Replicas of one workload normally share a layout, so
// the difference rarely matters; Merge chooses the consistent answer.
func Merge(hs ...*Histogram) (*Histogram, error) {
	if len(hs) == 0 {
		return nil, fmt.Errorf("%w: nothing to merge", ErrInvalid)
	}
	same := true
	for i, h := range hs {
		if err := h.Validate(); err != nil {
			return nil, fmt.Errorf("merge input %d: %w", i, err)
		}
		same = same && sameBounds(hs[0], h)
	}
	bounds := hs[0].Bounds
	if !same {
		bounds = unionBounds(hs)
	}
	out := &Histogram{
		Bounds: append([]float64(nil), bounds...),
		Counts: make([]float64, len(bounds)),
	}
	for _, h := range hs {
		addOnto(out, h, same)
		out.Sum += h.Sum
		out.Count += h.Count
	}
	return out, nil
}

// addOnto adds h's cumulative counts to out, whose bounds are a superset of
// h's.
func addOnto(out, h *Histogram, same bool) {
	if same {
		for i, c := range h.Counts {
			out.Counts[i] += c
		}
		return
	}
	j := -1 // index of h's largest bound <= the current union bound
	for i, u := range out.Bounds {
		for j+1 < len(h.Bounds) && h.Bounds[j+1] <= u {
			j++
		}
		if j >= 0 {
			out.Counts[i] += h.Counts[j]
		}
	}
}

func unionBounds(hs []*Histogram) []float64 {
	var all []float64
	for _, h := range hs {
		all = append(all, h.Bounds...)
	}
	slices.Sort(all)
	return slices.Compact(all)
}
