package capacity

import (
	"math"
	"time"
)

// MaxPrefillBusy is the largest busy fraction of one replica's prefill at
// which at most the fraction wait of requests queue longer than one mean
// prefill: the solution of rho * exp(-(1-rho)) = wait, the tail of the
// waiting time of an M/M/1 queue, P(W > t) = rho * exp(-(1-rho) t / s), at
// t = s, the mean service time. A replica prefills its admitted requests
// one after another (chunks are handed out in admission order), so its
// prefill is one server; bounding the quantile's queueing by its own
// prefill keeps the quantile's time to first token within twice the
// prefill it cannot avoid. Exponential service times make this
// conservative for prompts of less varied length. For a p90 objective
// (wait 0.1) it is about 0.22.
func MaxPrefillBusy(wait float64) float64 {
	if !(wait > 0) {
		return 0
	}
	if wait >= 1 {
		return 1
	}
	lo, hi := 0.0, 1.0
	for range 60 { // rho*exp(rho-1) rises with rho from 0 to 1
		mid := (lo + hi) / 2
		if mid*math.Exp(mid-1) <= wait {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// prefillCounter is a pod's last cumulative prefill time and count, at
// the time of the sample they came from, and the busy fraction measured
// between that sample and the one before (rated: there was one).
type prefillCounter struct {
	t        time.Time
	sec, cnt float64
	busy     float64
	rated    bool
}

// prefillLoad is what the replicas' prefill counters say at one estimate.
type prefillLoad struct {
	// busy is the sum, over the replicas with two samples, of their
	// prefill busy fractions; rated how many they are.
	busy  float64
	rated int
	// meanSec is the mean prefill time of a request, 0 when none was
	// prefilled since the previous samples.
	meanSec float64
}

// observePrefill updates the per-pod counters with pods and returns the
// prefill load. Rates are taken between the times of the samples, not of
// the estimates: the HPA may ask more often than the servers are
// scraped, and a sample seen twice is no new interval (its pod keeps the
// rate it had). A counter lower than before is a restarted server: its
// rate starts again from the new sample.
func (st *workloadState) observePrefill(pods []Pod) prefillLoad {
	var (
		l          prefillLoad
		dSec, dCnt float64
		seen       = make(map[string]bool, len(pods))
	)
	if st.prefill == nil {
		st.prefill = map[string]prefillCounter{}
	}
	for _, p := range pods {
		if !p.Ready || !p.Data || !p.Prefill || p.Name == "" || p.PrefillTime.IsZero() {
			continue
		}
		seen[p.Name] = true
		prev, ok := st.prefill[p.Name]
		cur := prefillCounter{t: p.PrefillTime, sec: p.PrefillSeconds, cnt: p.Prefills}
		switch dt := cur.t.Sub(prev.t).Seconds(); {
		case ok && dt == 0 && cur.sec == prev.sec && cur.cnt == prev.cnt:
			cur = prev // the same sample again
		case ok && dt > 0 && cur.sec >= prev.sec && cur.cnt >= prev.cnt:
			// Prefills of one replica overlap only where one request's
			// last chunk and the next one's first share a step, so the
			// time they add up to is the time the replica spent
			// prefilling, up to that overlap; the fraction is capped at
			// its physical 1.
			cur.busy, cur.rated = min(1, (cur.sec-prev.sec)/dt), true
			dSec += cur.sec - prev.sec
			dCnt += cur.cnt - prev.cnt
		}
		st.prefill[p.Name] = cur
		if cur.rated {
			l.busy += cur.busy
			l.rated++
		}
	}
	for name := range st.prefill {
		if !seen[name] {
			delete(st.prefill, name)
		}
	}
	if dCnt > 0 {
		l.meanSec = dSec / dCnt
	}
	return l
}
