package capacity

import (
	"math"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// ITLLimit is what the window's inter-token latencies say of one
// replica's decode: how many sequences it decodes within the ITL
// objective.
type ITLLimit struct {
	// Tokens is how many token gaps the window holds, and TokensPerSecond
	// the replicas' generated-token rate over it: the decode demand the
	// term answers.
	Tokens, TokensPerSecond float64
	// Quantile is the window's ITL at the objective's quantile, in
	// seconds (itlQuantile: histogram_quantile's, moved within its bucket
	// by what the histogram's exact mean says), and Mean its mean gap.
	Quantile, Mean float64
	// Decoding is the sequences one replica decoded at a time, on
	// average over the window: the sum of the gaps over the
	// replica-seconds they cover (a sequence decoding for a second
	// accrues a second of gaps, whatever the step time).
	Decoding float64
	// Base and PerSequence are the decode step's fixed cost and its cost
	// per sequence in the batch, in seconds: a straight line through the
	// mean gap of each replica at each estimate against the sequences it
	// decoded meanwhile (itlFit). Fitted is false while the replicas'
	// batches have not spread enough to tell the slope from noise; the
	// line is then taken through zero (ITL in proportion to the batch),
	// which overstates how fast ITL grows with the batch, so the term
	// asks for more replicas, never fewer, than the line would.
	Base, PerSequence float64
	Fitted            bool
	// Slots is how many sequences one replica decodes with its ITL
	// quantile within the objective: where the line plus the window's
	// spread of the quantile over the mean (Quantile - Mean) reaches the
	// objective. 0 when Reachable is false.
	Slots float64
	// Reachable is false when the fixed cost and the spread alone exceed
	// the objective: no number of replicas brings the quantile within it,
	// so the term asks for none.
	Reachable bool
}

// ReadsITL reports whether the estimates read the pods' ITL histograms:
// only with an ITL objective (provider.ITLReader).
func (e *Estimator) ReadsITL() bool { return e.cfg.ITLObjective > 0 }

// itlTerm fills est's ITL parts when the configuration has an ITL
// objective: the replicas' decoding, grown as the demand is forecast to
// grow (as the prefill term grows its work), over what one replica decodes
// within the objective.
func (e *Estimator) itlTerm(st *workloadState, now time.Time, pods []Pod, est *Estimate) {
	if e.cfg.ITLObjective <= 0 {
		return
	}
	scale := e.cfg.TimeScale
	if scale <= 0 {
		scale = 1
	}
	st.itlFit.observe(now, pods, st.itl.last, st.itl.lastAt, scale, e.cfg.Window)
	st.itl.observe(now, pods, e.cfg.Window, func(p Pod) *histogram.Histogram { return p.ITL })
	inc, span := st.itl.total()
	podTime := st.itl.podTime()
	q := e.cfg.Quantile
	if inc == nil || span <= 0 || podTime <= 0 || !(q > 0 && q < 1) || inc.Count < 1/(1-q) {
		return
	}
	lim := ITLLimit{Tokens: inc.Count, TokensPerSecond: inc.Count / (span.Seconds() * scale),
		Quantile: itlQuantile(q, inc), Mean: inc.Sum / inc.Count, Decoding: inc.Sum / (podTime.Seconds() * scale)}
	est.ITL = lim
	if !(lim.Quantile > 0) || math.IsInf(lim.Quantile, 0) || !(lim.Decoding > 0) {
		return
	}
	lim.Base, lim.PerSequence, lim.Fitted = st.itlFit.line(lim.Mean, lim.Decoding)
	spread := max(lim.Quantile-lim.Mean, 0)
	if room := e.cfg.ITLObjective.Seconds() - spread - lim.Base; room > 0 && lim.PerSequence > 0 {
		lim.Slots, lim.Reachable = room/lim.PerSequence, true
	}
	est.ITL = lim
	if !lim.Reachable || est.Forecast <= 0 {
		return
	}
	growth := 1.0
	if level := st.holt.Level(); level > 0 {
		growth = max(1, st.forecast(now, est.Horizon)/level)
	}
	decoding := inc.Sum / (span.Seconds() * scale) // sequences decoding, over every replica
	est.ITLNeeded = decoding * growth / lim.Slots
}

// itlFit is a weighted least-squares line of a replica's mean token gap
// against the sequences it decoded, over each replica's increase from one
// estimate to the next: the decode step's cost. The sums decay with a time
// constant of ten windows: the line is the hardware's and the model's,
// which change rarely, while the points it needs (batches of different
// sizes) come only as load changes.
type itlFit struct {
	w, b, m, bb, bm, mm float64
	at                  time.Time
}

// observe adds each pod's point since the previous estimate: the sum of
// its new gaps over the elapsed time (sequences decoding) and over their
// number (mean gap), weighted by the gaps' number.
func (f *itlFit) observe(now time.Time, pods []Pod, last map[string]*histogram.Histogram, lastAt time.Time, scale float64, window time.Duration) {
	if !f.at.IsZero() && now.After(f.at) {
		k := math.Exp(-now.Sub(f.at).Seconds() / (10 * window.Seconds()))
		f.w, f.b, f.m, f.bb, f.bm, f.mm = k*f.w, k*f.b, k*f.m, k*f.bb, k*f.bm, k*f.mm
	}
	f.at = now
	dt := now.Sub(lastAt).Seconds() * scale
	if lastAt.IsZero() || dt <= 0 {
		return
	}
	for _, p := range pods {
		prev, ok := last[p.UID]
		if p.ITL == nil || !ok {
			continue
		}
		inc, err := histogram.Increase(prev, p.ITL)
		if err != nil || inc.Count < 1 || !(inc.Sum > 0) {
			continue
		}
		b, m, w := inc.Sum/dt, inc.Sum/inc.Count, inc.Count
		f.w += w
		f.b += w * b
		f.m += w * m
		f.bb += w * b * b
		f.bm += w * b * m
		f.mm += w * m * m
	}
}

// minBatchSpread is the least coefficient of variation of the batches
// behind the line for its slope to be used: batches within a few percent
// of each other say nothing of the slope that their noise does not.
const minBatchSpread = 0.1

// line returns the step's fixed cost and cost per sequence, and whether
// they were fitted. The slope must be positive and at least twice its
// standard error (the usual 95% test), the fixed cost between 0 and the
// mean gap; otherwise the line through zero and (decoding, mean) stands.
func (f *itlFit) line(mean, decoding float64) (base, per float64, fitted bool) {
	proportional := func() (float64, float64, bool) { return 0, mean / decoding, false }
	if f.w <= 0 {
		return proportional()
	}
	mb, mm := f.b/f.w, f.m/f.w
	vb := f.bb/f.w - mb*mb
	if !(vb > 0) || math.Sqrt(vb) < minBatchSpread*mb {
		return proportional()
	}
	per = (f.bm/f.w - mb*mm) / vb
	base = mm - per*mb
	// Residual variance of the weighted fit, and the slope's standard
	// error with the weights counted as observations.
	resid := max(f.mm/f.w-mm*mm-per*per*vb, 0)
	se := math.Sqrt(resid / (vb * max(f.w-2, 1)))
	if !(per > 2*se) || base < 0 || base > mean {
		return proportional()
	}
	return base, per, true
}

// itlQuantile is the q-quantile of h for the ITL term. histogram_quantile
// interpolates linearly inside the quantile's bucket, as if the bucket's
// gaps were spread evenly across it; decode steps are not (a replica's
// gaps sit close together, at its step time), and a bucket of vLLM's is a
// third of its bound wide (75 to 100 ms): every gap of 77 ms reads as a
// p90 of 97.5 ms. The histogram's sum is exact, so the interpolated
// quantile is scaled by the exact mean over the mean of the same
// interpolation (each finite bucket's gaps at its middle, the first's from
// 0, those past the last finite bound at it), and kept within the
// quantile's bucket, which the counts do establish.
func itlQuantile(q float64, h *histogram.Histogram) float64 {
	v := histogram.Quantile(q, h)
	if math.IsNaN(v) || math.IsInf(v, 0) || !(h.Count > 0) || !(h.Sum > 0) {
		return v
	}
	var interp, lo, prev float64
	bucketLo, bucketHi := 0.0, math.Inf(1)
	found := false
	for i, b := range h.Bounds {
		n := max(h.Counts[i]-prev, 0)
		prev = max(prev, h.Counts[i])
		mid := (lo + b) / 2
		if math.IsInf(b, 1) {
			mid = lo
		}
		interp += n * mid
		if !found && v <= b {
			bucketLo, bucketHi, found = lo, b, true
		}
		lo = b
	}
	if !(interp > 0) {
		return v
	}
	return min(max(v*(h.Sum/h.Count)/(interp/h.Count), bucketLo), bucketHi)
}
