package capacity

import "time"

// spread measures how evenly the router spreads the load over the Ready
// replicas: the index of dispersion (variance over mean, across the
// replicas with data) of the share of its KV cache each has in use, the
// variance and mean smoothed over the window so that one estimate's few
// replicas do not decide it.
//
// The index is E[k^2]/E[k] of the requests' sizes k when a router picks
// replicas at random; a round-robin or least-loaded router
// makes it smaller, a sticky one larger. The capacity terms take it as
// measured instead of assuming either: it is how many replicas' worth of
// spare room the spread of the load costs.
type spread struct {
	// kvVar and kvMean are the smoothed cross-replica variance and mean;
	// at the time of the last estimate with two replicas or more.
	kvVar, kvMean float64
	at            time.Time
}

// observe adds one estimate's replicas' KV shares (0-1). It needs two
// replicas or more.
func (s *spread) observe(now time.Time, kv []float64, window time.Duration) {
	if len(kv) < 2 {
		return
	}
	km, kvv := meanVar(kv)
	w := 1.0
	if !s.at.IsZero() {
		w = weight(max(now.Sub(s.at).Seconds(), 0), window)
	}
	s.kvVar += w * (kvv - s.kvVar)
	s.kvMean += w * (km - s.kvMean)
	s.at = now
}

// kv is the index of dispersion of the KV share in use, ok false before it
// was measured on a load.
func (s *spread) kv() (float64, bool) {
	if s.at.IsZero() || !(s.kvMean > 0) {
		return 0, false
	}
	return min(s.kvVar/s.kvMean, maxDispersion), true
}

// maxDispersion bounds a measured index: a router can put a replica's whole
// share of a window's requests on it at once, but a larger index is a
// transient (a replica just Ready, one draining) more than a spread.
const maxDispersion = 4

// meanVar is xs' mean and sample variance.
func meanVar(xs []float64) (mean, variance float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		variance += (x - mean) * (x - mean)
	}
	return mean, variance / float64(len(xs)-1)
}
