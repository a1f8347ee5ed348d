package capacity

import "math"

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
	// Erlang B by its stable recurrence, then C from B.
	b := 1.0
	for k := 1; k <= c; k++ {
		b = a * b / (float64(k) + a*b)
	}
	return float64(c) * b / (float64(c) - a*(1-b))
}

// MaxLoad is the largest load, in Erlangs, that c slots carry while at most
// the fraction wait of requests has to queue (ErlangC(c, load) <= wait).
// A request admitted at once has its time to first token set by prefill
// alone; so for a TTFT objective on the q-quantile, wait is 1-q: the load
// at which the quantile's request starts to queue. It is 0 for c < 1 and
// grows towards c as c grows (pooling), which is why a replica that holds
// few requests must run emptier than one that holds many.
func MaxLoad(c int, wait float64) float64 {
	if c < 1 || !(wait > 0) {
		return 0
	}
	if wait >= 1 {
		return float64(c)
	}
	lo, hi := 0.0, float64(c)
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
