package store

import (
	"math"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// packedHist is a latency histogram (TTFT, ITL) as a window keeps it. Counts are
// cumulative and grow by a few requests between two scrapes, so most of a
// series' histograms are kept as 16-bit offsets from an earlier one of the
// series, its base: 64 bytes instead of 256 for vLLM's 23 buckets, which at
// 10,000 pods and a minute of scrapes every 5 s, for TTFT and ITL, is 50
// MiB. A histogram is its own base, with every offset zero, when there is
// none of its layout before it, when a count fell (a restart), is not an
// integer, or grew past what 16 bits hold, when its count is not its +Inf
// bucket's (or its base's is not), and when it has more buckets than
// maxPackedBuckets. Either way it unpacks to exactly the histogram that was
// stored.
type packedHist struct {
	// base holds full counts, and the bounds.
	base *histogram.Histogram
	sum  float64
	// off are the counts' offsets from base's, all zero when base is this
	// histogram. The count is base's plus the +Inf bucket's offset, since
	// a histogram is packed only when both counts are their +Inf
	// buckets'. Inline, not a slice: a TTFT list reads two histograms of
	// each of 10,000 pods, and every pointer followed is a cache miss.
	off [maxPackedBuckets]uint16
}

// maxPackedBuckets covers vLLM's TTFT layout (23 buckets with +Inf),
// SGLang's (19) and Triton's (5), and the ITL layouts of vLLM (20) and
// SGLang (24); TGI's 36 duration buckets are kept whole. With base and sum
// it makes 64 bytes, one of Go's size classes.
const maxPackedBuckets = 24

// pack returns h packed against base, a full histogram of the same bounds
// earlier in its series, or as its own base when it cannot be (or base is
// nil). The result keeps base and h's bounds; neither may change after.
func pack(h, base *histogram.Histogram) *packedHist {
	if base == nil || len(h.Counts) > maxPackedBuckets || !offsetsFit(h.Counts, base.Counts) ||
		!countIsInf(h) || !countIsInf(base) {
		return &packedHist{base: h, sum: h.Sum}
	}
	p := &packedHist{base: base, sum: h.Sum}
	for i, c := range h.Counts {
		p.off[i] = uint16(c - base.Counts[i])
	}
	return p
}

// countIsInf reports whether h's count is its +Inf bucket's, as it is in
// every histogram a Prometheus client exposes.
func countIsInf(h *histogram.Histogram) bool {
	return len(h.Counts) > 0 && h.Count == h.Counts[len(h.Counts)-1]
}

// offsetsFit reports whether every count is base's plus an integer that
// uint16 holds, exactly as unpack will add it back.
func offsetsFit(counts, base []float64) bool {
	if len(counts) != len(base) {
		return false
	}
	for i, c := range counts {
		d := c - base[i]
		if !(d >= 0 && d <= math.MaxUint16 && d == math.Trunc(d) && base[i]+d == c) {
			return false
		}
	}
	return true
}

// unpack returns the histogram, in dst unless it has more buckets than a
// packed one may (then the base itself, not to be modified).
func (p *packedHist) unpack(dst *histogram.Histogram) *histogram.Histogram {
	base := p.base.Counts
	if len(base) > maxPackedBuckets {
		return p.base
	}
	if cap(dst.Counts) < len(base) {
		dst.Counts = make([]float64, len(base))
	}
	dst.Counts = dst.Counts[:len(base)]
	for i, b := range base {
		dst.Counts[i] = b + float64(p.off[i])
	}
	dst.Bounds, dst.Sum, dst.Count = p.base.Bounds, p.sum, p.base.Count
	if n := len(base); n > 0 {
		dst.Count += float64(p.off[n-1])
	}
	return dst
}
