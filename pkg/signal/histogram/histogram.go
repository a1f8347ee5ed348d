// Package histogram holds classic (bucketed) Prometheus histograms as the
// adapter stores them, and computes quantiles over a window exactly as
// PromQL's histogram_quantile(q, rate(x_bucket[w])) does.
package histogram

import (
	"errors"
	"fmt"
	"math"
)

// Histogram is one classic Prometheus histogram at one instant: cumulative
// bucket counts by ascending upper bound. The last bound is +Inf. Values are
// in seconds for latency histograms (dialects convert milliseconds).
type Histogram struct {
	Bounds []float64 // ascending upper bounds, last is math.Inf(+1)
	Counts []float64 // cumulative counts, same length as Bounds
	Sum    float64
	Count  float64
}

var (
	// ErrInvalid is wrapped by every error that reports a malformed histogram.
	ErrInvalid = errors.New("invalid histogram")
	// ErrBoundsMismatch reports two samples of one series with different
	// bucket layouts: the series was redeployed with other buckets, and any
	// increase across that change is meaningless.
	ErrBoundsMismatch = errors.New("histogram bucket bounds differ")
	// ErrTooFewSamples reports a window holding fewer than two samples, from
	// which no increase can be computed (PromQL returns no result then).
	ErrTooFewSamples = errors.New("fewer than two histogram samples in window")
)

// Validate checks that h is a classic histogram the other functions of this
// package can work on: at least one bucket, as many counts as bounds, bounds
// strictly ascending and ending with +Inf, counts and Count neither NaN,
// infinite nor negative. Cumulative counts that decrease from one bucket to
// the next are accepted: expositions that read buckets non-atomically produce
// them, and Quantile repairs them the way PromQL does. So are negative
// bounds, which PromQL handles. The adapter holds a scraped TTFT histogram
// to more than this (signal.CheckTTFT): a negative duration or a decreasing
// count there is a broken or hostile target, not a layout to repair.
func (h *Histogram) Validate() error {
	if h == nil {
		return fmt.Errorf("%w: nil", ErrInvalid)
	}
	if len(h.Bounds) == 0 {
		return fmt.Errorf("%w: no buckets", ErrInvalid)
	}
	if len(h.Bounds) != len(h.Counts) {
		return fmt.Errorf("%w: %d bounds but %d counts", ErrInvalid, len(h.Bounds), len(h.Counts))
	}
	for i, b := range h.Bounds {
		if math.IsNaN(b) {
			return fmt.Errorf("%w: bound %d is NaN", ErrInvalid, i)
		}
		if i > 0 && b <= h.Bounds[i-1] {
			return fmt.Errorf("%w: bound %d (%g) not above bound %d (%g)", ErrInvalid, i, b, i-1, h.Bounds[i-1])
		}
		if err := checkCount(h.Counts[i]); err != nil {
			return fmt.Errorf("%w: bucket le=%g: %w", ErrInvalid, b, err)
		}
	}
	if last := h.Bounds[len(h.Bounds)-1]; !math.IsInf(last, +1) {
		return fmt.Errorf("%w: last bound is %g, not +Inf", ErrInvalid, last)
	}
	if err := checkCount(h.Count); err != nil {
		return fmt.Errorf("%w: count: %w", ErrInvalid, err)
	}
	return nil
}

func checkCount(c float64) error {
	switch {
	case math.IsNaN(c):
		return errors.New("NaN")
	case math.IsInf(c, 0):
		return fmt.Errorf("infinite (%g)", c)
	case c < 0:
		return fmt.Errorf("negative (%g)", c)
	}
	return nil
}

// Clone returns a deep copy of h.
func (h *Histogram) Clone() *Histogram {
	return &Histogram{
		Bounds: append([]float64(nil), h.Bounds...),
		Counts: append([]float64(nil), h.Counts...),
		Sum:    h.Sum,
		Count:  h.Count,
	}
}

// sameBounds reports whether a and b have identical bucket layouts.
func sameBounds(a, b *Histogram) bool {
	if len(a.Bounds) != len(b.Bounds) {
		return false
	}
	for i := range a.Bounds {
		if a.Bounds[i] != b.Bounds[i] {
			return false
		}
	}
	return true
}
