package capacity

import (
	"math"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// MaxCorrection bounds the closed loop at most: the model's replicas are
// trusted within a factor of two either way. A larger error is no model's
// error (routing, a head-of-line request, an engine version) but a wrong
// configuration, which the signal's exported parts make visible. The
// default bounds are narrower (DefaultConfig).
const MaxCorrection = 2.0

// loop corrects the model's replicas online by what the servers measure:
// the objective's quantile of the times to first token over the window.
// The model predicts that the objective holds whenever the replicas it
// asks for are Ready; the loop moves only where the measurement disagrees
// while they were:
//
//   - The objective missed while the Ready replicas were at least what the
//     corrected model asked (its utilization, averaged over the window, at
//     most 1 within the HPA's tolerance) is the model's error: the
//     correction grows by the log of the miss (at most a doubling) per
//     start-up horizon, the time constant of anything the signal changes.
//   - The objective met with room (the quantile below the middle between
//     the prefills' own quantile, which no replicas bring below, and the
//     objective) while the replicas were what the corrected model asked is
//     capacity the model does not see: the correction shrinks at half that
//     rate, so a quiet minute undoes little.
//   - A miss while the replicas were short of what was asked, now or on
//     average over the window, or while replicas are loading (a burst, a
//     start-up), is no error of the model's: nothing moves.
//
// So a model error is corrected with a time constant of one horizon (the
// pods' start-up, a minute for the bench's replicas) upwards and two
// downwards, within [1/MaxCorrection, MaxCorrection]; its state is the
// Estimate's Correction and MeasuredTTFT.
type loop struct {
	log float64 // of the correction
	// utilization is the corrected model's utilization averaged with the
	// window's time constant: the replicas, against what was asked, while
	// the window's requests were served.
	utilization float64
	at          time.Time
}

func (l *loop) factor() float64 { return math.Exp(l.log) }

// update takes the window's measured quantile (0 or NaN: too few to tell), the
// objective, the floor no replicas bring the quantile below, and the
// corrected model's utilization now.
func (l *loop) update(now time.Time, measured, objective, floor, utilization float64, settled bool, horizon, window time.Duration, lo, hi float64) {
	if l.at.IsZero() {
		l.at, l.utilization = now, utilization
		return
	}
	dt := now.Sub(l.at).Seconds()
	if !(dt > 0) {
		return
	}
	l.at = now
	l.utilization += weight(dt, window) * (utilization - l.utilization)
	if !(measured > 0) || !(objective > 0) || horizon <= 0 || floor >= objective {
		return
	}
	step := min(dt, window.Seconds()) / horizon.Seconds()
	comfortable := floor + (objective-floor)/2
	switch {
	case measured > objective && settled && max(l.utilization, utilization) <= 1+hpaTolerance:
		l.log += step * min(math.Log(measured/objective), math.Ln2)
	case measured < comfortable && settled && min(l.utilization, utilization) >= 1-hpaTolerance:
		l.log -= step / 2 * min(math.Log(comfortable/math.Max(measured, comfortable/2)), math.Ln2)
	}
	l.log = min(max(l.log, math.Log(lo)), math.Log(hi))
}

// hpaTolerance is the HPA controller's default tolerance: within it of the
// target, the replicas are what was asked.
const hpaTolerance = 0.1

// closeLoop measures the window's TTFT quantile and updates the
// correction with the model's replicas (uncorrected) now, against
// objective (the TTFT objective, or the share of it a prefill pool has).
func (e *Estimator) closeLoop(st *workloadState, now time.Time, pods []Pod, model float64, objective time.Duration, est *Estimate) {
	st.ttft.observe(now, pods, e.cfg.Window, func(p Pod) *histogram.Histogram { return p.TTFT })
	est.MeasuredTTFT = 0
	if inc, _ := st.ttft.total(); inc != nil && inc.Count >= 1/(1-e.cfg.Quantile) {
		if q := histogram.Quantile(e.cfg.Quantile, inc); !math.IsNaN(q) && !math.IsInf(q, 0) {
			est.MeasuredTTFT = q
		}
	}
	var floor float64
	if inc, _ := st.prefill.total(); inc != nil && inc.Count > 0 {
		if q := histogram.Quantile(e.cfg.Quantile, inc); !math.IsNaN(q) && !math.IsInf(q, 0) {
			floor = q
		}
	}
	u := 0.0
	if est.Replicas > 0 {
		u = model * st.loop.factor() / float64(est.Replicas)
	}
	lo, hi := e.cfg.correctionBounds()
	st.loop.update(now, est.MeasuredTTFT, objective.Seconds(), floor, u, est.Loading == 0, est.Horizon, e.cfg.Window, lo, hi)
	est.Correction = st.loop.factor()
}

// ClosedLoop says whether the loop may correct the model at all: false
// when its bounds are both 1 (a role's pool, provider.RoleCapacityConfig).
func (c Config) ClosedLoop() bool {
	lo, hi := c.correctionBounds()
	return lo < 1 || hi > 1
}

// correctionBounds are the loop's bounds, within [1/MaxCorrection,
// MaxCorrection]; unset (0) they are the widest.
func (c Config) correctionBounds() (lo, hi float64) {
	lo, hi = c.MinCorrection, c.MaxCorrection
	if !(lo > 0) {
		lo = 1 / MaxCorrection
	}
	if !(hi > 0) {
		hi = MaxCorrection
	}
	lo = min(max(lo, 1/MaxCorrection), 1)
	hi = min(max(hi, 1), MaxCorrection)
	return lo, hi
}
