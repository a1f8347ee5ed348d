package capacity

import (
	"math"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// PrefillLimit is what one replica's prefill carries within the objective,
// worked out from the prefill times its requests took.
type PrefillLimit struct {
	// Requests is how many prefill times the estimate rests on.
	Requests float64
	// OverObjective is the share of requests whose prefill alone took
	// longer than the objective: no number of replicas brings them in.
	OverObjective float64
	// MaxBusy is the busy fraction of one replica's prefill at which the
	// requests that could meet the objective miss it through waiting no
	// more often than the objective's tail allows; 0 when Reachable is
	// false.
	MaxBusy float64
	// Reachable is false when the objective's quantile is out of reach
	// whatever the replicas: at least 1-q of the prompts take longer than
	// the objective to prefill alone. Replicas added then buy nothing for
	// the objective, so the prefill term asks for none.
	Reachable bool
}

// MaxPrefillBusy solves for the busy fraction one replica's prefill can
// run at, from inc, the increase over a window of the replicas' merged
// prefill-time histograms (seconds), the objective (seconds) and its
// quantile q.
//
// Prefill is a single server working through prompts first come, first
// served (vLLM's scheduler admits from the head of its queue and chunks
// prefill in admission order), fed by the router's spread of requests: a
// G/G/1 queue whose service times S are the prefill times, and whose
// arrivals vary as the measured index of dispersion (1: a random router,
// M/G/1; below 1 for a round-robin one) says.
// A request meets the objective T when its wait W and its own prefill fit:
// W + S <= T. In M/G/1, P(W > 0) = rho and, once waiting, W is close to
// exponential with mean E[Se]/(1-rho), Se = E[S^2]/(2 E[S]) the residual
// service (Pollaczek-Khinchine; exact for exponential S). So the share of
// requests that could meet T (S <= T) but miss it by waiting is
//
//	rho * E[exp(-(T-S)(1-rho)/E[Se]); S <= T] / P(S <= T)
//
// with E[Se] taken, for arrivals other than Poisson, by Kingman's
// approximation as E[S](ca2 + cs2)/2, ca2 the dispersion; and MaxBusy is
// the rho at which that share is 1-q: of the requests the
// replicas can bring within the objective, at most the objective's tail
// misses it. Requests whose prefill alone exceeds T are out of reach and
// are left out of the budget rather than spending replicas on them; if
// they are 1-q or more of all, the objective is unreachable (Reachable
// false). Fewer than 1/(1-q) requests have no 1-q tail to estimate, and no
// limit is given either.
//
// Each finite bucket's requests are taken at its middle (the first bucket's
// from 0), those above the last finite bound at that bound; the share over
// T is interpolated linearly inside T's bucket, as histogram_quantile does.
func MaxPrefillBusy(inc *histogram.Histogram, objective, q, dispersion float64) PrefillLimit {
	var lim PrefillLimit
	if inc == nil || inc.Validate() != nil || !(objective > 0) || !(q > 0 && q < 1) {
		return lim
	}
	masses, total, below := prefillMasses(inc, objective)
	lim.Requests = total
	if total < 1/(1-q) {
		return lim
	}
	lim.OverObjective = 1 - below/total
	if lim.OverObjective >= 1-q {
		return lim
	}
	lim.Reachable = true
	var m1, m2 float64
	for _, m := range masses {
		m1 += m.n * m.s
		m2 += m.n * m.s * m.s
	}
	if m1 <= 0 {
		// Every prefill took no measurable time: prefill is never the
		// limit.
		lim.MaxBusy = 1
		return lim
	}
	// Kingman's G/G/1 approximation: the wait grows with (ca2 + cs2)/2,
	// ca2 the arrivals' and cs2 the prefill times' squared coefficients
	// of variation; for Poisson arrivals (ca2 = 1) that is the residual
	// service above. The arrivals' variability is what the router makes
	// of them, the measured index of dispersion of the requests each
	// replica holds (1 at random, less round-robin).
	ca2 := min(max(dispersion, 0), maxDispersion)
	residual := (m2/m1 - m1/total*(1-ca2)) / 2
	if residual <= 1e-9*m1/total { // equal prefills arriving evenly
		lim.MaxBusy = 1
		return lim
	}
	budget := (1 - q) * below / total
	missed := func(rho float64) float64 {
		v := 0.0
		for _, m := range masses {
			if m.s <= objective {
				v += m.n * math.Exp(-(objective-m.s)*(1-rho)/residual)
			}
		}
		return rho * v / total
	}
	lo, hi := 0.0, 1.0
	for range 50 {
		mid := (lo + hi) / 2
		if missed(mid) > budget {
			hi = mid
		} else {
			lo = mid
		}
	}
	lim.MaxBusy = lo
	return lim
}

// prefillMass is a histogram bucket's requests (n), taken at one prefill
// time (s).
type prefillMass struct{ s, n float64 }

// prefillMasses reads inc's buckets as masses at their middles (the first
// bucket's from 0, the +Inf bucket's at the last finite bound), with the
// requests in all and those whose prefill alone fits the objective,
// interpolated linearly inside the objective's bucket as
// histogram_quantile does.
func prefillMasses(inc *histogram.Histogram, objective float64) (masses []prefillMass, total, below float64) {
	var lo, prev float64
	for i, b := range inc.Bounds {
		n := max(inc.Counts[i]-prev, 0)
		prev = max(prev, inc.Counts[i])
		mid := (lo + b) / 2
		if math.IsInf(b, 1) {
			mid = lo
		}
		switch {
		case b <= objective:
			below += n
		case lo < objective:
			below += n * (objective - lo) / (b - lo) // 0 for the +Inf bucket
		}
		masses = append(masses, prefillMass{mid, n})
		total += n
		lo = b
	}
	return masses, total, below
}

// prefillPoolLimit is MaxPrefillBusy for a pool that does nothing but
// prefill, where the objective is out of reach: at least 1-q of the prompts
// take longer than the objective to prefill alone, so no number of replicas
// meets it. Such a pool must still carry its work, so it is held to the
// objective the prompts' own prefill times allow: twice the q-quantile of
// the prefill times, at which a prompt of that quantile waits no longer
// than it takes. Reachable stays false.
func prefillPoolLimit(inc *histogram.Histogram, objective, q, dispersion float64) PrefillLimit {
	s := histogram.Quantile(q, inc)
	if math.IsNaN(s) || math.IsInf(s, 0) {
		return MaxPrefillBusy(inc, objective, q, dispersion)
	}
	lim := MaxPrefillBusy(inc, max(objective, 2*s), q, dispersion)
	lim.Reachable = false
	return lim
}
