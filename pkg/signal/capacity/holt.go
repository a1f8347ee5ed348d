package capacity

import (
	"math"
	"time"
)

// Smoothing sets Holt's three time constants. Zero means no smoothing
// for Level and Trend (the newest observation is all) and no damping
// for Damping (a linear trend).
type Smoothing struct {
	// Level and Trend are the time constants of the level's and the
	// trend's exponential smoothing.
	Level, Trend time.Duration
	// Damping is the time constant with which the trend fades as it is
	// projected ahead: after t seconds a trend b adds b*exp(-t/Damping)
	// per second (Gardner and McKenzie's phi per second is
	// exp(-1/Damping)).
	Damping time.Duration
}

// trendSignificance is how many standard errors a trend must exceed to
// be projected ahead: 2, the usual two-sided 95% test. The trend is
// soft-thresholded by that much (shrunk towards zero by two standard
// errors), so a trend that noise alone explains adds nothing and a real
// one is projected, slightly understated.
const trendSignificance = 2

// Holt is Holt's trend method (double exponential smoothing) with a
// damped trend (Gardner and McKenzie, "Forecasting trends in time
// series", Management Science 31(10), 1985), for observations at
// irregular times (Wright, "Forecasting data published at irregular time
// intervals using an extension of Holt's method", Management Science
// 32(4), 1986): a level and a trend per second, each smoothed with its own
// time constant, so that the weight of an observation depends on the time
// it covers, not on how often it is asked.
//
// Damping is written in continuous time: the discrete h-step forecast
// level + sum_{i=1..h} phi^i * trend becomes level + trend * D(h) with
// D(h) = tau * (1 - exp(-h/tau)), the integral of exp(-t/tau) over
// [0, h]. However far ahead it is asked, a damped forecast moves by at
// most trend * tau.
//
// Holt also keeps the noise of its own trend: the exponentially weighted
// variance of the level's raw slope, with the trend's weights. Forecast projects only the part of the trend that exceeds
// trendSignificance standard errors (SignificantTrend), so white noise
// in the observations, which Holt's trend turns into a random slope, is
// not multiplied by the horizon.
//
// The zero value is empty; the first observation sets the level, with no
// trend.
type Holt struct {
	level, trend float64 // trend in units per second, damped
	// meanSlope and slopeVar are the exponentially weighted mean and
	// variance (Finch 2009) of the level's raw slope, with the trend's
	// weights but undamped: the noise of the trend, measured apart from
	// the damping's own bias.
	meanSlope, slopeVar float64
	trendWeight         float64 // the trend's last smoothing weight
	damping             time.Duration
	last                time.Time
	n                   int
}

// Observe adds y observed at t with the given smoothing. An observation
// not after the last one is ignored: it carries no new time.
func (h *Holt) Observe(t time.Time, y float64, sm Smoothing) {
	h.damping = sm.Damping
	if h.n == 0 {
		*h = Holt{level: y, damping: sm.Damping, last: t, n: 1}
		return
	}
	dt := t.Sub(h.last)
	if dt <= 0 {
		return
	}
	s := dt.Seconds()
	a, b := weight(s, sm.Level), weight(s, sm.Trend)
	prev := h.level
	// The trend fades while it is projected over the interval.
	h.level = a*y + (1-a)*(h.level+h.trend*dampedSpan(s, sm.Damping))
	faded := h.trend * fade(s, sm.Damping)
	slope := (h.level - prev) / s
	dev := slope - h.meanSlope
	h.meanSlope += b * dev
	h.slopeVar = (1 - b) * (h.slopeVar + b*dev*dev)
	h.trend = b*slope + (1-b)*faded
	h.trendWeight = b
	h.last = t
	h.n++
}

// TrendStdErr is the standard error of the smoothed slope: an
// exponentially weighted mean with weight w of slopes of variance v has
// variance v*w/(2-w). (The damped trend, a shrunk mean, varies less.)
func (h *Holt) TrendStdErr() float64 {
	w := h.trendWeight
	if w <= 0 {
		return 0
	}
	return math.Sqrt(h.slopeVar * w / (2 - w))
}

// SignificantTrend is the trend shrunk towards zero by trendSignificance
// standard errors, zero when it does not exceed them.
func (h *Holt) SignificantTrend() float64 {
	m := math.Abs(h.trend) - trendSignificance*h.TrendStdErr()
	if m <= 0 {
		return 0
	}
	return math.Copysign(m, h.trend)
}

// Forecast is the level plus the significant trend, damped, over ahead
// from the last observation; 0 before any.
func (h *Holt) Forecast(ahead time.Duration) float64 {
	return h.level + h.SignificantTrend()*dampedSpan(ahead.Seconds(), h.damping)
}

// Level is the smoothed level.
func (h *Holt) Level() float64 { return h.level }

// Trend is the smoothed change per second, before the significance test.
func (h *Holt) Trend() float64 { return h.trend }

// Len is how many observations were taken.
func (h *Holt) Len() int { return h.n }

// weight is the share of an observation covering s seconds under time
// constant tau: 1-exp(-s/tau), all of it with no time constant.
func weight(s float64, tau time.Duration) float64 {
	if tau <= 0 {
		return 1
	}
	return 1 - math.Exp(-s/tau.Seconds())
}

// fade is what remains of a trend projected s seconds ahead under
// damping tau: exp(-s/tau), all of it with no damping.
func fade(s float64, tau time.Duration) float64 {
	if tau <= 0 {
		return 1
	}
	return math.Exp(-s / tau.Seconds())
}

// dampedSpan is how many seconds of the current trend a projection s
// seconds ahead adds: the integral of fade over [0, s], s undamped.
func dampedSpan(s float64, tau time.Duration) float64 {
	if tau <= 0 {
		return s
	}
	t := tau.Seconds()
	return t * (1 - math.Exp(-s/t))
}
