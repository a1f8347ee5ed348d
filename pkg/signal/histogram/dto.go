package histogram

import (
	"fmt"
	"math"

	dto "github.com/prometheus/client_model/go"
)

// FromDTO converts one classic histogram series, as parsed by expfmt, into a
// Histogram, multiplying bounds and Sum by scale (1 for seconds, 0.001 for a
// histogram in milliseconds such as Triton's). The +Inf bucket, which
// client_golang leaves implicit, is added with the sample count when
// missing. A native histogram without classic buckets is rejected: its
// exponential buckets are not a layout histogram_quantile over _bucket
// series could see.
func FromDTO(m *dto.Metric, scale float64) (*Histogram, error) {
	dh := m.GetHistogram()
	if dh == nil {
		return nil, fmt.Errorf("%w: metric holds no histogram", ErrInvalid)
	}
	if !(scale > 0) || math.IsInf(scale, 0) {
		return nil, fmt.Errorf("%w: scale %g must be positive and finite", ErrInvalid, scale)
	}
	buckets := dh.GetBucket()
	if len(buckets) == 0 && (dh.Schema != nil || len(dh.GetPositiveSpan()) > 0 || len(dh.GetNegativeSpan()) > 0) {
		return nil, fmt.Errorf("%w: native histogram without classic buckets", ErrInvalid)
	}
	count := float64(dh.GetSampleCount())
	if f := dh.SampleCountFloat; f != nil && (*f != 0 || dh.SampleCount == nil) {
		count = *f
	}
	h := &Histogram{
		Bounds: make([]float64, 0, len(buckets)+1),
		Counts: make([]float64, 0, len(buckets)+1),
		Sum:    dh.GetSampleSum() * scale,
		Count:  count,
	}
	for _, b := range buckets {
		h.Bounds = append(h.Bounds, b.GetUpperBound()*scale)
		h.Counts = append(h.Counts, bucketCount(b))
	}
	if n := len(h.Bounds); n == 0 || !math.IsInf(h.Bounds[n-1], +1) {
		h.Bounds = append(h.Bounds, math.Inf(+1))
		h.Counts = append(h.Counts, count)
	}
	if err := h.Validate(); err != nil {
		return nil, err
	}
	return h, nil
}

// bucketCount reads a bucket's cumulative count. The float field overrides
// the integer one when set (expfmt's text parser sets only the float field,
// zeros included, once any count of the histogram is fractional).
func bucketCount(b *dto.Bucket) float64 {
	if f := b.CumulativeCountFloat; f != nil && (*f != 0 || b.CumulativeCount == nil) {
		return *f
	}
	return float64(b.GetCumulativeCount())
}
