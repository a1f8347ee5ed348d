package capacity

import "math"

// MaxKVLoad is the mean share of one replica's KV cache that its requests
// in flight may fill while at most the fraction late of arriving requests
// find too little KV free for a request of the mean size: the KV term's
// capacity per replica.
//
// A replica's KV in use, K, is a sum of unequal requests' sizes. Its mean
// is mu and its variance dispersion x mu: the index of dispersion, which
// the estimator measures across the replicas (var/mean of their KV shares).
// For requests routed at random (a Poisson number in flight, an M/G/inf
// occupancy) the index is E[k^2]/E[k] of the sizes k, so a mix with a heavy
// tail of long prompts has a large one and must run emptier; a round-robin
// router keeps the replicas' loads more even than that, and the index
// measured says by how much. Neither is assumed: both are what the servers
// report. A request of the mean size kbar is admitted at once when
// K <= 1 - kbar; taking K as normal, that holds with probability 1-late
// when
//
//	mu + z sqrt(dispersion mu) = 1 - kbar,   z = the (1-late) normal quantile,
//
// a quadratic in sqrt(mu). Counting each request as one of 1/kbar equal
// slots (Erlang C) instead asks a replica that holds 2-4 long prompts to
// run at a fraction of a request (issue #31's long-context trace), and
// misses that the KV in use varies by the sizes, not the count, of what
// is in flight.
//
// It is 0 when no request of the mean size fits (kbar >= 1) and 1 - kbar
// when late allows half of the requests to wait (late >= 0.5) or the KV in
// use does not vary.
func MaxKVLoad(kbar, dispersion, late float64) float64 {
	if !(kbar > 0) || kbar >= 1 || !(late > 0) {
		return 0
	}
	room := 1 - kbar
	if late >= 0.5 || !(dispersion > 0) {
		return room
	}
	b := normalQuantile(1-late) * math.Sqrt(dispersion)
	x := (-b + math.Sqrt(b*b+4*room)) / 2
	return x * x
}

// normalQuantile is the standard normal distribution's p-quantile.
func normalQuantile(p float64) float64 {
	return math.Sqrt2 * math.Erfinv(2*p-1)
}

// LateBudget is the share of requests that may find too little KV free, for
// a TTFT objective on the q-quantile: 1-q when any wait is a miss, and more
// when a request has slack, time it may wait and still meet the objective.
// A request that finds the cache full waits for occupants to finish; taking
// that wait as exponential with the mean residence of a request in the
// batch, it outlasts the slack with probability exp(-slack/residence), so a
// 1-q tail of misses allows (1-q) exp(slack/residence) of the requests to
// find the cache full. It is at most a half: past that, more than half of
// the requests wait, and no normal tail describes the cache.
func LateBudget(q, slack, residence float64) float64 {
	b := 1 - q
	if slack > 0 && residence > 0 {
		b *= math.Exp(slack / residence)
	}
	return min(b, 0.5)
}
