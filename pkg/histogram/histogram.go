// Package histogram holds classic (bucketed) Prometheus histograms as the
// adapter stores them, and computes quantiles over a window exactly as
// PromQL's histogram_quantile(q, rate(x_bucket[w])) does.
package histogram

// Histogram is one classic Prometheus histogram at one instant: cumulative
// bucket counts by ascending upper bound. The last bound is +Inf. Values are
// in seconds for latency histograms (dialects convert milliseconds).
type Histogram struct {
	Bounds []float64 // ascending upper bounds, last is math.Inf(+1)
	Counts []float64 // cumulative counts, same length as Bounds
	Sum    float64
	Count  float64
}
