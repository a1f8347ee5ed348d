package capacity

import (
	"math"
	"sync/atomic"
)

// ErlangC is the probability that a request arriving at c parallel slots
// offered a Erlangs of load (the mean number of slots busy) has to wait:
// the Erlang C formula of an M/M/c queue. It is 1 at or past saturation
// (a >= c).
func ErlangC(c int, a float64) float64 {
	if c < 1 || !(a > 0) {
		if a > 0 {
			return 1
		}
		return 0
	}
	if a >= float64(c) {
		return 1
	}
	b := erlangB(c, a)
	return float64(c) * b / (float64(c) - a*(1-b))
}

// erlangB is the Erlang B blocking probability of c slots offered a < c
// Erlangs, by its stable recurrence B(k) = a B(k-1) / (k + a B(k-1)). The
// recurrence contracts by about min(k/a, a/k) a step, so it starts 10
// standard deviations of the offered load below a, from the overloaded
// system's blocking 1-k/a, rather than from k = 0: whatever the start's
// error, the steps up to a shrink it by about exp(-10²/2) = 2e-22. So the
// work is c - a + 10√a steps, not c.
func erlangB(c int, a float64) float64 {
	k0, b := 0, 1.0
	if start := a - 10*math.Sqrt(a); start >= 1 {
		k0 = int(start)
		b = 1 - float64(k0)/a
	}
	for k := k0 + 1; k <= c; k++ {
		b = a * b / (float64(k) + a*b)
	}
	return b
}

// exactSlots is the most slots MaxLoad solves Erlang C for. Past it the
// load a replica carries is its slots less a spare capacity of
// beta√c + gamma: square-root staffing (Halfin and Whitt 1981, exact as c
// grows) and the constant of its next order, both fitted to the exact
// answers at exactSlots and at a quarter of it. There the usable share is
// already 98.9% at a p90 objective, and the law stays within 0.005 of a
// request of the exact answer up to 16 times exactSlots at p90 and p99
// (TestMaxLoadPastExactSlots). Solving exactly costs work that grows with
// the slots, which a pod's own numbers set (slots = running / KV in use).
const exactSlots = 1 << 14

// MaxLoad is the largest load, in Erlangs, that c slots carry while at most
// the fraction wait of requests has to queue (ErlangC(c, load) <= wait).
// A request admitted at once has its time to first token set by prefill
// alone; so for a TTFT objective on the q-quantile, wait is 1-q: the load
// at which the quantile's request starts to queue. It is 0 for c < 1 and
// grows towards c as c grows (pooling), which is why a replica that holds
// few requests must run emptier than one that holds many.
//
// Its cost does not grow with c past exactSlots (BenchmarkMaxLoad: at most
// a few hundred microseconds, for any c).
func MaxLoad(c int, wait float64) float64 {
	if c < 1 || !(wait > 0) {
		return 0
	}
	if wait >= 1 {
		return float64(c)
	}
	if c <= exactSlots {
		return maxLoadExact(c, wait)
	}
	beta, gamma := anchor(wait)
	return float64(c) - beta*math.Sqrt(float64(c)) - gamma
}

// anchored is the last wait MaxLoad extrapolated for and the spare
// capacity's law for it: an estimator asks with one wait only, and the
// law's two exact answers are the costliest MaxLoad solves.
var anchored atomic.Pointer[[3]float64]

// anchor returns beta and gamma of the spare capacity beta√c + gamma past
// exactSlots, fitted to the exact spare capacity at exactSlots and at a
// quarter of it: the square-root term of Halfin and Whitt and the constant
// term of its next order.
func anchor(wait float64) (beta, gamma float64) {
	if a := anchored.Load(); a != nil && a[0] == wait {
		return a[1], a[2]
	}
	s1 := exactSlots - maxLoadExact(exactSlots, wait)
	s2 := exactSlots/4 - maxLoadExact(exactSlots/4, wait)
	beta = 2 * (s1 - s2) / math.Sqrt(exactSlots)
	gamma = 2*s2 - s1
	anchored.Store(&[3]float64{wait, beta, gamma})
	return beta, gamma
}

// maxLoadExact solves ErlangC(c, load) = wait by bisection, for 0 < wait
// < 1. The answer lies a few √c below c (square-root staffing), so the
// search starts from c - 4√c, widening until Erlang C is within wait
// there: a bracket of a few √c needs fewer steps, and each step's Erlang B
// costs c - load + 10√load.
func maxLoadExact(c int, wait float64) float64 {
	fc := float64(c)
	lo := 0.0
	for k := 4.0; ; k *= 2 {
		lo = max(0, fc-k*math.Sqrt(fc))
		if lo == 0 || ErlangC(c, lo) <= wait {
			break
		}
	}
	hi := fc
	for range 60 { // bisection to float precision; ErlangC rises with load
		mid := (lo + hi) / 2
		if ErlangC(c, mid) <= wait {
			lo = mid
		} else {
			hi = mid
		}
		if hi-lo < 1e-9*math.Max(1, hi) {
			break
		}
	}
	return lo
}
