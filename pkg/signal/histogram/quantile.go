package histogram

import (
	"math"
	"slices"
	"sort"
)

// smallDeltaTolerance is PromQL's threshold (promql/quantile.go) below which
// a relative difference between neighbouring cumulative counts is taken for
// floating-point noise and ignored.
const smallDeltaTolerance = 1e-12

// minNormal is the smallest positive normal float64, as in Prometheus's
// util/almost.
var minNormal = math.Float64frombits(0x0010000000000000)

type bucket struct {
	upper, count float64
}

// Quantile returns the q-quantile of h exactly as PromQL's
// histogram_quantile computes it for classic histograms (BucketQuantile in
// promql/quantile.go, Prometheus v0.316.0): linear interpolation within the
// bucket holding rank q*count, with these special cases:
//
//   - q is NaN: NaN; q < 0: -Inf; q > 1: +Inf.
//   - no +Inf bucket, fewer than two buckets, or zero observations: NaN.
//   - rank in the +Inf bucket: the highest finite bound.
//   - rank in the first bucket: interpolated from 0 if its bound is
//     positive, else that bound itself.
//
// Like PromQL, it sorts buckets by bound, adds up buckets with equal
// bounds, ignores relative differences below 1e-12 between neighbouring
// counts and forces counts to be monotonic. A histogram whose bounds and
// counts differ in length, or with a NaN bound (which PromQL would sort
// arbitrarily), gives NaN. Quantile does not modify h.
//
// Quantile is scale-invariant: multiplying every count by the same factor
// (rate's division by the window) does not change the result beyond float
// rounding, so a quantile of an increase equals the quantile of the rate.
func Quantile(q float64, h *Histogram) float64 {
	switch {
	case math.IsNaN(q):
		return math.NaN()
	case q < 0:
		return math.Inf(-1)
	case q > 1:
		return math.Inf(+1)
	}
	if h == nil || len(h.Bounds) == 0 || len(h.Bounds) != len(h.Counts) {
		return math.NaN()
	}
	var buf [32]bucket
	buckets := buf[:0]
	sorted := true
	for i, b := range h.Bounds {
		if math.IsNaN(b) {
			return math.NaN()
		}
		sorted = sorted && (i == 0 || b >= h.Bounds[i-1])
		buckets = append(buckets, bucket{upper: b, count: h.Counts[i]})
	}
	// Stored histograms are validated, so their bounds already ascend;
	// sorting them anyway was a tenth of a 10,000-pod TTFT list.
	if !sorted {
		slices.SortFunc(buckets, func(a, b bucket) int {
			switch {
			case a.upper < b.upper:
				return -1
			case a.upper > b.upper:
				return +1
			}
			return 0
		})
	}
	if !math.IsInf(buckets[len(buckets)-1].upper, +1) {
		return math.NaN()
	}
	buckets = coalesce(buckets)
	ensureMonotonic(buckets)
	if len(buckets) < 2 {
		return math.NaN()
	}
	observations := buckets[len(buckets)-1].count
	if observations == 0 {
		return math.NaN()
	}
	return interpolate(buckets, q*observations)
}

// interpolate finds the bucket holding rank and interpolates linearly in it.
func interpolate(buckets []bucket, rank float64) float64 {
	b := sort.Search(len(buckets)-1, func(i int) bool { return buckets[i].count >= rank })
	switch {
	case b == len(buckets)-1:
		return buckets[len(buckets)-2].upper
	case b == 0 && buckets[0].upper <= 0:
		return buckets[0].upper
	}
	var (
		start float64
		end   = buckets[b].upper
		count = buckets[b].count
	)
	if b > 0 {
		start = buckets[b-1].upper
		count -= buckets[b-1].count
		rank -= buckets[b-1].count
	}
	return start + (end-start)*(rank/count)
}

// coalesce adds up the counts of buckets with equal bounds; buckets must be
// sorted.
func coalesce(buckets []bucket) []bucket {
	last := buckets[0]
	i := 0
	for _, b := range buckets[1:] {
		if b.upper == last.upper {
			last.count += b.count
			continue
		}
		buckets[i] = last
		last = b
		i++
	}
	buckets[i] = last
	return buckets[:i+1]
}

// ensureMonotonic is PromQL's ensureMonotonicAndIgnoreSmallDeltas: it first
// flattens numerically insignificant differences between neighbours (in
// either direction), then removes every decrease, leaving the running
// maximum.
func ensureMonotonic(buckets []bucket) {
	prev := buckets[0].count
	for i := 1; i < len(buckets); i++ {
		curr := buckets[i].count
		switch {
		case curr == prev:
		case almostEqual(prev, curr, smallDeltaTolerance), curr < prev:
			// Keep prev: the difference is noise or a decrease.
			buckets[i].count = prev
		default:
			prev = curr
		}
	}
}

// almostEqual is Prometheus's util/almost.Equal without its staleness-marker
// case: rates never carry staleness markers.
func almostEqual(a, b, epsilon float64) bool {
	if math.IsNaN(a) && math.IsNaN(b) {
		return true
	}
	if a == b {
		return true
	}
	absSum := math.Abs(a) + math.Abs(b)
	diff := math.Abs(a - b)
	if a == 0 || b == 0 || absSum < minNormal {
		return diff < epsilon*minNormal
	}
	return diff/math.Min(absSum, math.MaxFloat64) < epsilon
}
