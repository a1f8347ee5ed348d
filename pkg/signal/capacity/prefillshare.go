package capacity

import (
	"fmt"
	"math"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// A disaggregated request's time to first token is its prefill pool's part
// (a wait for prefill, the prompt's prefill, the first token) and then its
// decode pool's (the KV cache's transfer, a wait for a slot, the first
// step on the decode replica). Both parts count against one objective, so
// the prefill pool may use only what the decode pool's part leaves of it.
// The decode pool's part is what its servers measure as their time to
// first token, from the request's arrival on the decode replica; its
// median over the window is what a typical request spends there. The
// prefill pool keeps at least half the objective whatever the decode pool
// measures: a decode pool that misses the objective on its own is its own
// signal's to scale, and handing the prefill pool nothing would have it
// ask for every replica its HPA allows.

// EstimatePrefillPool is Estimate for the prefill pool of a disaggregated
// model, pods its pods and decode its decode pool's (each with its newest
// TTFT histogram and UID): the prefill term is held to the objective less
// the decode pool's median time to first token over the window, at least
// half the objective (Estimate.PrefillObjective). With no decode pool, or
// none of its requests in the window, it is Estimate.
func (e *Estimator) EstimatePrefillPool(k Key, now time.Time, pods, decode []Pod) (Estimate, error) {
	st, err := e.stateFor(k, now, hasData(pods))
	if err != nil {
		e.metrics.failed(err)
		return Estimate{}, fmt.Errorf("%s/%s: %w", k.Namespace, k.Target, err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	objective := e.prefillShare(st, now, decode)
	est, err := e.estimate(st, now, pods, objective)
	if err != nil {
		e.metrics.failed(err)
		return Estimate{}, fmt.Errorf("%s/%s: %w", k.Namespace, k.Target, err)
	}
	e.metrics.set(k, est)
	return est, nil
}

// prefillShare records the decode pool's TTFT histograms and returns the
// prefill pool's share of the objective.
func (e *Estimator) prefillShare(st *workloadState, now time.Time, decode []Pod) time.Duration {
	st.decodeTTFT.observe(now, decode, e.cfg.Window, func(p Pod) *histogram.Histogram { return p.TTFT })
	inc, _ := st.decodeTTFT.total()
	if inc == nil || !(inc.Count > 0) {
		return e.cfg.Objective
	}
	median := histogram.Quantile(0.5, inc)
	if math.IsNaN(median) || math.IsInf(median, 0) || median < 0 {
		return e.cfg.Objective
	}
	part := time.Duration(min(median, e.cfg.Objective.Seconds()) * float64(time.Second))
	return max(e.cfg.Objective-part, e.cfg.Objective/2)
}
