package capacity

import (
	"math"
	"time"
)

// Holt is Holt's linear trend method (double exponential smoothing) for
// observations at irregular times: a level and a trend per second, each
// smoothed with its own time constant, so that the weight of an
// observation depends on the time it covers, not on how often it is asked
// (Wright, "Forecasting data published at irregular time intervals using
// an extension of Holt's method", Management Science 32(4), 1986). The
// zero value is empty; the first observation sets the level, with no
// trend.
type Holt struct {
	level, trend float64 // trend in units per second
	last         time.Time
	n            int
}

// Observe adds y observed at t, smoothing the level with the time
// constant tauLevel and the trend with tauTrend. An observation not after
// the last one is ignored: it carries no new time.
func (h *Holt) Observe(t time.Time, y float64, tauLevel, tauTrend time.Duration) {
	if h.n == 0 {
		h.level, h.trend, h.last, h.n = y, 0, t, 1
		return
	}
	dt := t.Sub(h.last)
	if dt <= 0 {
		return
	}
	s := dt.Seconds()
	a, b := weight(s, tauLevel), weight(s, tauTrend)
	prev := h.level
	h.level = a*y + (1-a)*(h.level+h.trend*s)
	h.trend = b*(h.level-prev)/s + (1-b)*h.trend
	h.last = t
	h.n++
}

// Forecast is the level plus the trend over ahead from the last
// observation; 0 before any.
func (h *Holt) Forecast(ahead time.Duration) float64 {
	return h.level + h.trend*ahead.Seconds()
}

// Level and Trend (per second) are the smoothed state.
func (h *Holt) Level() float64 { return h.level }

// Trend is the smoothed change per second.
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
