package histogram

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Increase returns how much every bucket, Count and Sum grew from older to
// newer, two samples of one series. Each bucket is a counter of its own, as
// in PromQL's rate and increase on x_bucket: a bucket whose value dropped was
// reset, and its increase is its value after the reset. Bounds must be
// identical; ErrBoundsMismatch means the layout changed and the caller must
// start over.
func Increase(older, newer *Histogram) (*Histogram, error) {
	return WindowIncrease([]*Histogram{older, newer})
}

// WindowIncrease returns the per-bucket increase over samples (oldest
// first) of one series, reset-aware between every consecutive pair: what
// PromQL's increase(x_bucket[w]) computes before extrapolating to the
// window's edges.
//
// That extrapolation multiplies each bucket's increase by
// (sampled + toStart + toEnd) / sampled. When all buckets come from the same
// scrapes the durations are the same for every bucket, and histogram_quantile
// is invariant under a common factor, so the quantile of WindowIncrease equals
// histogram_quantile(q, rate(x_bucket[w])) -- with one exception: PromQL
// shortens toStart per bucket to where that bucket's counter would have been
// zero (sampled * first/increase) when that is nearer. A bucket whose value
// at the window's first sample is small next to its increase (below
// toStart/sampled, about 9% for a 1m window scraped every 5s; typical of a
// server started within the window, or a bucket that was empty until
// recently) is then extrapolated less than the others, and the quantiles
// differ. ExtrapolatedIncrease reproduces PromQL exactly, including that.
func WindowIncrease(samples []*Histogram) (*Histogram, error) {
	for i, h := range samples {
		if err := h.Validate(); err != nil {
			return nil, fmt.Errorf("sample %d: %w", i, err)
		}
	}
	return WindowIncreaseOfValid(samples)
}

// WindowIncreaseOfValid is WindowIncrease for samples that have each
// passed Validate already, as a store's samples did when it took them:
// validating every sample of a window again on every evaluation was half
// the cost of a 10,000-pod TTFT list. It still checks that the bucket
// layouts agree.
func WindowIncreaseOfValid(samples []*Histogram) (*Histogram, error) {
	if len(samples) < 2 {
		return nil, fmt.Errorf("%w: got %d", ErrTooFewSamples, len(samples))
	}
	for i, h := range samples {
		if !sameBounds(samples[0], h) {
			return nil, fmt.Errorf("sample %d: %w", i, ErrBoundsMismatch)
		}
	}
	first, last := samples[0], samples[len(samples)-1]
	out := &Histogram{
		Bounds: append([]float64(nil), first.Bounds...),
		Counts: make([]float64, len(first.Counts)),
		Sum:    last.Sum - first.Sum,
		Count:  last.Count - first.Count,
	}
	for i := range out.Counts {
		out.Counts[i] = last.Counts[i] - first.Counts[i]
	}
	// PromQL's formulation: last - first, plus the value before every drop.
	for k := 1; k < len(samples); k++ {
		addDrops(out.Counts, &out.Sum, &out.Count, samples[k-1], samples[k])
	}
	return out, nil
}

// addDrops adds to counts, sum and count the value that each counter of
// prev had if it dropped by cur: a counter reset, after which PromQL counts
// the new value as increase on top of the old one.
func addDrops(counts []float64, sum, count *float64, prev, cur *Histogram) {
	for i, c := range cur.Counts {
		if c < prev.Counts[i] {
			counts[i] += prev.Counts[i]
		}
	}
	if cur.Sum < prev.Sum {
		*sum += prev.Sum
	}
	if cur.Count < prev.Count {
		*count += prev.Count
	}
}

// Sample is one scrape of a histogram series.
type Sample struct {
	T time.Time
	H *Histogram
}

// ExtrapolatedIncrease returns increase(x_bucket[window]) evaluated at at,
// exactly as PromQL computes it (extrapolatedRate in promql/functions.go,
// without start timestamps): the samples in the left-open range
// (at-window, at], at millisecond precision like Prometheus's storage, their
// reset-aware increase per bucket, extrapolated per bucket to the range's
// edges. Samples must be in ascending time order. Divide by the window's
// seconds for rate; Quantile does not need that.
func ExtrapolatedIncrease(samples []Sample, at time.Time, window time.Duration) (*Histogram, error) {
	end := at.UnixMilli()
	start := end - window.Milliseconds()
	var (
		in []*Histogram
		ts []int64
	)
	for i, s := range samples {
		t := s.T.UnixMilli()
		if i > 0 && t <= samples[i-1].T.UnixMilli() {
			return nil, fmt.Errorf("%w: sample %d not after sample %d", ErrInvalid, i, i-1)
		}
		if t > start && t <= end {
			in = append(in, s.H)
			ts = append(ts, t)
		}
	}
	inc, err := WindowIncrease(in)
	if err != nil {
		return nil, err
	}
	return Extrapolate(inc, in[0], time.UnixMilli(ts[0]), time.UnixMilli(ts[len(ts)-1]), len(ts), at, window), nil
}

// Extrapolate scales inc, the WindowIncrease of n samples of which the
// first, first, was taken at firstT and the last at lastT, to the edges of
// the range (at-window, at] per bucket, as PromQL's increase() does. It
// returns a new histogram, so callers may cache inc and extrapolate it at
// every evaluation time.
func Extrapolate(inc, first *Histogram, firstT, lastT time.Time, n int, at time.Time, window time.Duration) *Histogram {
	out := ExtrapolateInto(&Histogram{}, inc, first, firstT, lastT, n, at, window)
	out.Bounds = slices.Clone(inc.Bounds)
	return out
}

// ExtrapolateInto is Extrapolate writing into dst, whose Counts it reuses
// and whose Bounds it points at inc's: a caller that extrapolates
// thousands of histograms in a row needs one scratch histogram, not one
// allocation each. dst may be inc itself. It returns dst.
func ExtrapolateInto(dst, inc, first *Histogram, firstT, lastT time.Time, n int, at time.Time, window time.Duration) *Histogram {
	w := newExtrapolation(firstT, lastT, n, at, window)
	dst.Bounds = inc.Bounds
	dst.Counts = slices.Grow(dst.Counts[:0], len(inc.Counts))[:len(inc.Counts)]
	for i, c := range inc.Counts {
		dst.Counts[i] = c * w.factor(first.Counts[i], c)
	}
	dst.Count = inc.Count * w.factor(first.Count, inc.Count)
	dst.Sum = inc.Sum * w.factor(first.Sum, inc.Sum)
	return dst
}

// StartReach is how far, in seconds, ExtrapolateInto extrapolates a
// bucket's counter back from its first sample towards the start of the
// range (at-window, at]: the distance to it, or half the average interval
// between samples when that distance is 1.1 intervals or more. A bucket
// whose counter would reach zero sooner (ZeroReach) stops there instead.
func StartReach(firstT, lastT time.Time, n int, at time.Time, window time.Duration) float64 {
	return newExtrapolation(firstT, lastT, n, at, window).startReach()
}

// ZeroReach is the least distance, in seconds, before the first sample at
// which one of inc's buckets that increased would reach zero when its
// increase from first is extrapolated backwards; +Inf when none increased.
// Where ZeroReach is not less than StartReach, ExtrapolateInto scales
// every bucket by one factor, so Quantile of inc equals Quantile of its
// extrapolation (Quantile is scale-invariant), whatever at is. The buckets'
// counts alone count: Quantile reads neither Count nor Sum.
func ZeroReach(inc, first *Histogram, firstT, lastT time.Time) float64 {
	sampled := float64(lastT.UnixMilli()-firstT.UnixMilli()) / 1000
	reach := math.Inf(1)
	for i, c := range inc.Counts {
		if c > 0 && first.Counts[i] >= 0 {
			reach = min(reach, sampled*(first.Counts[i]/c))
		}
	}
	return reach
}

// extrapolation holds the durations, in seconds, that PromQL extrapolates a
// counter's increase over.
type extrapolation struct {
	toStart, toEnd, sampled, avg float64
}

func newExtrapolation(firstT, lastT time.Time, n int, at time.Time, window time.Duration) extrapolation {
	end := at.UnixMilli()
	start := end - window.Milliseconds()
	ft, lt := firstT.UnixMilli(), lastT.UnixMilli()
	w := extrapolation{
		toStart: float64(ft-start) / 1000,
		toEnd:   float64(end-lt) / 1000,
		sampled: float64(lt-ft) / 1000,
	}
	w.avg = w.sampled / float64(n-1)
	return w
}

// startReach is toStart, limited to half an interval when the range
// starts 1.1 intervals or more before the first sample.
func (w extrapolation) startReach() float64 {
	if w.toStart >= w.avg*1.1 {
		return w.avg / 2
	}
	return w.toStart
}

// factor is PromQL's extrapolation factor for one counter whose value at the
// first sample was first and which increased by increase.
func (w extrapolation) factor(first, increase float64) float64 {
	toStart, toEnd := w.startReach(), w.toEnd
	// Counters cannot go negative: stop at the extrapolated zero point.
	toZero := toStart
	if increase > 0 && first >= 0 {
		toZero = w.sampled * (first / increase)
	}
	if toZero < toStart {
		toStart = toZero
	}
	if toEnd >= w.avg*1.1 {
		toEnd = w.avg / 2
	}
	if w.sampled == 0 {
		return 1
	}
	return (w.sampled + toStart + toEnd) / w.sampled
}
