package autoscalebench

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

// StaticNeed is the static policy's size: provisioning for the peak, known
// in hindsight. It is the fewest always-ready replicas that meet the TTFT
// p90 SLO in as many trace minutes as limit replicas do, when requests go
// to them in turn (as simworld.World.Send routes them), found by simulating
// the replicas offline with the replay's engine. Some minutes miss the SLO
// however many replicas serve them, when enough of their prompts take
// longer than slo to prefill alone; more replicas do not help those. It
// also returns how many minutes that size meets, of how many.
func StaticNeed(reqs []trace.Request, p inferencesim.Profile, slo time.Duration, limit int) (n, met, minutes int, err error) {
	if len(reqs) == 0 {
		return 0, 0, 0, fmt.Errorf("autoscalebench: no requests to size for")
	}
	ideal, err := simulate(reqs, p, limit, nil)
	if err != nil {
		return 0, 0, 0, err
	}
	best, minutes := minutesMet(reqs, ideal, slo)
	if best == 0 {
		return 0, 0, minutes, fmt.Errorf("autoscalebench: even %d replicas meet the %v SLO in no trace minute", limit, slo)
	}
	for n := 1; n < limit; n++ {
		out, err := simulate(reqs, p, n, nil)
		if err != nil {
			return 0, 0, 0, err
		}
		if met, _ := minutesMet(reqs, out, slo); met >= best {
			return n, met, minutes, nil
		}
	}
	return limit, best, minutes, nil
}

// rejected marks, in simulate's TTFTs, a request the replica refused
// (inferencesim.ErrInvalidRequest: larger than its KV cache).
const rejected = -2

// simulate replays reqs on n idle replicas of profile p, round-robin, and
// returns each request's TTFT (-1 if it never got a first token, which an
// engine run to the end cannot produce; rejected if the replica refused
// it). A refused request takes its turn: the replica it was sent to
// refused it, as simworld's round-robin does. finished, if not nil, hears
// every request that completes.
func simulate(reqs []trace.Request, p inferencesim.Profile, n int, finished func(inferencesim.Completion)) ([]time.Duration, error) {
	return simulateAs(reqs, p, n, finished, wholeRequest)
}

// wholeRequest is a trace request as one server serves it, prompt and
// output.
func wholeRequest(r trace.Request) inferencesim.Request {
	return inferencesim.Request{ContextTokens: r.ContextTokens, GeneratedTokens: r.GeneratedTokens}
}

// simulateAs is simulate with each request made a server's by as: a
// disaggregated pool's part of it.
func simulateAs(reqs []trace.Request, p inferencesim.Profile, n int, finished func(inferencesim.Completion), as func(trace.Request) inferencesim.Request) ([]time.Duration, error) {
	origin := time.Unix(0, 0)
	engines := make([]*inferencesim.Engine, n)
	for i := range engines {
		e, err := inferencesim.NewEngine(p, func() time.Time { return origin })
		if err != nil {
			return nil, err
		}
		e.SetHooks(inferencesim.Hooks{Finished: finished})
		engines[i] = e
	}
	ttft := make([]time.Duration, len(reqs))
	for i, r := range reqs {
		ttft[i] = -1
		err := engines[i%n].SubmitNotify(origin.Add(r.At), as(r), func(d time.Duration) { ttft[i] = d })
		switch {
		case errors.Is(err, inferencesim.ErrInvalidRequest):
			ttft[i] = rejected
		case err != nil:
			return nil, fmt.Errorf("autoscalebench: request %d: %w", i, err)
		}
	}
	end := origin.Add(reqs[len(reqs)-1].At + time.Hour)
	for _, e := range engines {
		e.Advance(end)
	}
	return ttft, nil
}

// minutesMet counts the trace minutes with requests whose TTFT p90 is
// within slo; a request without a first token counts as infinitely late,
// and a rejected one not at all.
func minutesMet(reqs []trace.Request, ttft []time.Duration, slo time.Duration) (met, minutes int) {
	byMinute := map[int64][]time.Duration{}
	for i, r := range reqs {
		d := ttft[i]
		if d == rejected {
			continue
		}
		if d < 0 {
			d = math.MaxInt64
		}
		m := int64(r.At / time.Minute)
		byMinute[m] = append(byMinute[m], d)
	}
	for _, ds := range byMinute {
		if durationQuantile(ds, 0.9) <= slo {
			met++
		}
	}
	return met, len(byMinute)
}

// durationQuantile is the q-quantile of ds by the nearest-rank method: the
// smallest value with at least q of the values at or below it.
func durationQuantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}
