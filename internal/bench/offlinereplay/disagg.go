package offlinereplay

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

// Pool names a role's pool in a disaggregated replay.
type Pool int

// The pools of prefill/decode disaggregation.
const (
	Prefill Pool = iota
	Decode
	numPools
)

func (p Pool) String() string {
	if p == Prefill {
		return "prefill"
	}
	return "decode"
}

// KVTransfer is how a request's KV cache moves from its prefill replica to
// its decode replica: each decode replica pulls one request's cache at a
// time, over its own link, in the order they are handed to it.
type KVTransfer struct {
	// BytesPerToken is the model's KV cache per token: 128 KiB for
	// Llama-3.1-8B in bf16 (32 layers x 8 KV heads x 128 x 2 x 2 bytes).
	BytesPerToken float64
	// BytesPerSecond is a link's bandwidth.
	BytesPerSecond float64
}

// DefaultKVTransfer is Llama-3.1-8B's cache over 25 Gb/s Ethernet, what
// clouds give L4 instances (no RDMA): about 46 ms for a 1,100-token
// prompt.
func DefaultKVTransfer() KVTransfer {
	return KVTransfer{BytesPerToken: 128 << 10, BytesPerSecond: 25e9 / 8}
}

// Time is how long a cache of tokens takes over one link.
func (k KVTransfer) Time(tokens int) time.Duration {
	if k.BytesPerSecond <= 0 {
		return 0
	}
	return time.Duration(float64(tokens) * k.BytesPerToken / k.BytesPerSecond * float64(time.Second))
}

// DisaggView is what a policy sees of both pools at an HPA sync.
type DisaggView struct {
	Now   time.Time
	Pools [numPools]View
}

// DisaggPolicy recommends each pool's replicas at a sync, before the pool's
// HPA behavior; ok false for a pool is a metric error (its HPA keeps its
// replicas).
type DisaggPolicy interface {
	Recommend(v DisaggView) (replicas [numPools]int, ok [numPools]bool)
}

// DisaggConfig is one replay of a model served by a prefill pool and a
// decode pool: each request is prefilled (prompt and first token) on a
// prefill replica, its KV cache moves to a decode replica, which generates
// its tokens, each step with its own queue. The time to first token a user
// sees is the request's arrival to the decode replica's first token.
type DisaggConfig struct {
	Requests []trace.Request
	// Profile is each replica's, both pools'.
	Profile inferencesim.Profile
	// SLO and ITLSLO are the objectives each minute is judged on: the p90
	// of its requests' times to first token and of their token gaps.
	SLO, ITLSLO           time.Duration
	ModelLoad, StartDelay time.Duration
	Grace                 time.Duration
	Transfer              KVTransfer
	// Initial are each pool's replicas, Ready when the replay starts.
	Initial                 [numPools]int
	Scrape, Sync, SyncPhase time.Duration
	Behavior                [numPools]Behavior
	// Policy decides at each sync; nil: Initial replicas throughout.
	Policy DisaggPolicy
}

// DisaggResult is what a disaggregated replay measured.
type DisaggResult struct {
	// Result's minutes are met when both the TTFT p90 (P90) and the ITL
	// p90 (ITLP90, seconds, over the token gaps of the minute's requests)
	// are within their objectives; MetMinute and MinutesMet say so.
	// ReplicaSeconds, Ups, Downs and Peak are over both pools.
	Result
	ITLP90 []float64
	// PrefillP90 is, per minute, the p90 of its requests' time from
	// arrival to the end of their prefill (seconds): the prefill pool's
	// part of P90.
	PrefillP90 []float64
	// TTFTMet and ITLMet count the minutes within each objective.
	TTFTMet, ITLMet int
	// PoolSeconds, PoolPeak and PoolDesired are each pool's bill, most
	// replicas and replicas after each sync.
	PoolSeconds [numPools]float64
	PoolPeak    [numPools]int
	PoolDesired [numPools][]int
}

// handoff is a prefilled request on its way to a decode replica.
type handoff struct {
	req  int       // index in the trace
	at   time.Time // prefill done
	done time.Time // KV cache arrived
}

// decodeIn is what a decode replica has been handed and not yet admitted.
type decodeIn struct {
	pending  []handoff // in arrival order of their caches
	linkFree time.Time
}

type disaggReplay struct {
	cfg     DisaggConfig
	pools   [numPools][]*pod
	inbound map[*pod]*decodeIn
	created [numPools]int
	rr      [numPools]int
	next    int
	waiting []handoff // prefilled, no decode replica Ready yet
	ttft    []time.Duration
	// prefillDone is each request's time from arrival to its prefill's
	// end, -1 until then.
	prefillDone []time.Duration
	gaps        [][]float64 // by trace minute of arrival
	hpa         [numPools]hpa
	res         DisaggResult
}

// RunDisagg replays cfg.
func RunDisagg(cfg DisaggConfig) (DisaggResult, error) {
	if len(cfg.Requests) == 0 || cfg.Scrape <= 0 || cfg.Sync <= 0 || cfg.Initial[Prefill] < 1 || cfg.Initial[Decode] < 1 {
		return DisaggResult{}, errors.New("offlinereplay: need requests, a scrape interval, a sync period and an initial replica in each pool")
	}
	minutes := int(cfg.Requests[len(cfg.Requests)-1].At/time.Minute) + 1
	r := &disaggReplay{cfg: cfg, inbound: map[*pod]*decodeIn{}, ttft: make([]time.Duration, len(cfg.Requests)), prefillDone: make([]time.Duration, len(cfg.Requests)), gaps: make([][]float64, minutes)}
	for i := range r.ttft {
		r.ttft[i], r.prefillDone[i] = -1, -1
	}
	for pl := range numPools {
		r.hpa[pl] = newHPA(cfg.Behavior[pl], cfg.Initial[pl])
		for range cfg.Initial[pl] {
			if err := r.addPod(Pool(pl), origin, true); err != nil {
				return DisaggResult{}, err
			}
		}
	}
	end := cfg.Requests[len(cfg.Requests)-1].At + tick
	for t := time.Duration(0); t <= end; t += tick {
		now := origin.Add(t)
		if err := r.dispatch(t); err != nil {
			return DisaggResult{}, err
		}
		r.advance(Prefill, now)
		r.handOver(now)
		if err := r.admit(now); err != nil {
			return DisaggResult{}, err
		}
		r.advance(Decode, now)
		r.retire(now)
		if t%cfg.Scrape == 0 {
			for pl := range numPools {
				r.scrape(Pool(pl), now)
			}
		}
		for pl := range numPools {
			r.res.PoolPeak[pl] = max(r.res.PoolPeak[pl], live(r.pools[pl]))
		}
		r.res.Peak = max(r.res.Peak, live(r.pools[Prefill])+live(r.pools[Decode]))
		if cfg.Policy != nil && t >= cfg.SyncPhase && (t-cfg.SyncPhase)%cfg.Sync == 0 {
			if err := r.sync(now); err != nil {
				return DisaggResult{}, err
			}
		}
	}
	return r.finish(origin.Add(end)), nil
}

// addPod creates a replica of a pool, as replay.addPod does.
func (r *disaggReplay) addPod(pl Pool, at time.Time, initial bool) error {
	e, err := inferencesim.NewEngine(r.cfg.Profile, func() time.Time { return at })
	if err != nil {
		return err
	}
	startup := r.cfg.StartDelay + r.cfg.ModelLoad
	p := &pod{name: fmt.Sprintf("llm-%s-%05d", pl, r.created[pl]), e: e, created: at, readyAt: at.Add(startup),
		prefill: newHistogram(vllmLatencyBounds), ttft: newHistogram(vllmTTFTBounds),
		prompts: newHistogram(vllmTokenBounds), outputs: newHistogram(vllmTokenBounds), itl: newHistogram(vllmITLBounds)}
	if initial {
		p.created, p.readyAt = at.Add(-startup), at
	}
	r.created[pl]++
	// A decode replica's time to first token is from the request's
	// arrival there, before its cache is pulled over, as vLLM's decode
	// instance measures it (admit observes it).
	firstToken := func(d time.Duration) { observe(p.ttft, d.Seconds()) }
	if pl == Decode {
		firstToken = nil
	}
	e.SetHooks(inferencesim.Hooks{
		FirstToken: firstToken,
		Token:      func(d time.Duration) { observe(p.itl, d.Seconds()) },
		Finished: func(c inferencesim.Completion) {
			observe(p.prefill, (c.FirstToken - c.Queued).Seconds())
			observe(p.prompts, float64(c.ContextTokens))
			observe(p.outputs, float64(c.GeneratedTokens))
		},
	})
	if pl == Decode {
		r.inbound[p] = &decodeIn{}
	}
	r.pools[pl] = append(r.pools[pl], p)
	return nil
}

// ready are a pool's replicas that take requests at at, in name order.
func (r *disaggReplay) ready(pl Pool, at time.Time) []*pod {
	var out []*pod
	for _, p := range r.pools[pl] {
		if p.removedAt.IsZero() && !p.readyAt.After(at) {
			out = append(out, p)
		}
	}
	return out
}

// dispatch submits the requests that arrive before t to the Ready prefill
// replicas in turn: each prefills its prompt and makes its first token,
// and is handed over when done.
func (r *disaggReplay) dispatch(t time.Duration) error {
	for ; r.next < len(r.cfg.Requests) && r.cfg.Requests[r.next].At < t; r.next++ {
		req := r.cfg.Requests[r.next]
		at := origin.Add(req.At)
		ready := r.ready(Prefill, at)
		if len(ready) == 0 {
			continue
		}
		p := ready[r.rr[Prefill]%len(ready)]
		r.rr[Prefill]++
		i := r.next
		// The whole request is validated here, as a server would refuse
		// it: the prefill replica computes only its prompt and first
		// token.
		if err := (inferencesim.Request{ContextTokens: req.ContextTokens, GeneratedTokens: req.GeneratedTokens}).Validate(r.cfg.Profile); err != nil {
			r.ttft[i], r.prefillDone[i] = rejected, rejected
			continue
		}
		err := p.e.SubmitFollow(at, inferencesim.Request{ContextTokens: req.ContextTokens, GeneratedTokens: 1}, inferencesim.Follow{
			Finished: func(c inferencesim.Completion) {
				r.waiting = append(r.waiting, handoff{req: i, at: at.Add(c.Total)})
				r.prefillDone[i] = c.Total
			},
		})
		if err != nil {
			return fmt.Errorf("offlinereplay: request %d: %w", i, err)
		}
	}
	return nil
}

func (r *disaggReplay) advance(pl Pool, now time.Time) {
	for _, p := range r.pools[pl] {
		p.e.Advance(now)
	}
}

// handOver gives each prefilled request a decode replica, the Ready ones in
// turn, and queues its cache on that replica's link. Requests prefilled
// while no decode replica is Ready wait for one.
func (r *disaggReplay) handOver(now time.Time) {
	slices.SortStableFunc(r.waiting, func(a, b handoff) int { return a.at.Compare(b.at) })
	kept := r.waiting[:0]
	for _, h := range r.waiting {
		at := later(h.at, origin)
		ready := r.ready(Decode, at)
		if len(ready) == 0 {
			if ready = r.ready(Decode, now); len(ready) == 0 {
				kept = append(kept, h)
				continue
			}
			at = now
		}
		p := ready[r.rr[Decode]%len(ready)]
		r.rr[Decode]++
		in := r.inbound[p]
		start := later(at, in.linkFree)
		h.done = start.Add(r.cfg.Transfer.Time(r.cfg.Requests[h.req].ContextTokens))
		in.linkFree = h.done
		in.pending = append(in.pending, h)
	}
	r.waiting = kept
}

// admit submits to each decode replica the requests whose caches have
// arrived by now, in the order they arrived.
func (r *disaggReplay) admit(now time.Time) error {
	for _, p := range r.pools[Decode] {
		in := r.inbound[p]
		n := 0
		for _, h := range in.pending {
			if h.done.After(now) {
				break
			}
			n++
			req := r.cfg.Requests[h.req]
			i, arrival := h.req, origin.Add(req.At)
			minute := int(req.At / time.Minute)
			err := p.e.SubmitFollow(h.done, inferencesim.Request{ContextTokens: req.ContextTokens, GeneratedTokens: req.GeneratedTokens, KVReady: true}, inferencesim.Follow{
				FirstToken: func(d time.Duration) {
					r.ttft[i] = h.done.Add(d).Sub(arrival)
					observe(p.ttft, h.done.Add(d).Sub(h.at).Seconds())
				},
				Token: func(g time.Duration) { r.gaps[minute] = append(r.gaps[minute], g.Seconds()) },
			})
			if err != nil {
				return fmt.Errorf("offlinereplay: request %d on %s: %w", i, p.name, err)
			}
		}
		in.pending = in.pending[n:]
	}
	return nil
}

// retire bills and drops the removed replicas that have drained (a decode
// replica's inbound caches included), whose grace is over, or that never
// served.
func (r *disaggReplay) retire(now time.Time) {
	for pl := range numPools {
		kept := r.pools[pl][:0]
		for _, p := range r.pools[pl] {
			if !p.removedAt.IsZero() {
				st := p.e.Peek()
				busy := st.Running+st.Waiting > 0
				if in := r.inbound[p]; in != nil && len(in.pending) > 0 {
					busy = true
				}
				if now.Sub(p.removedAt) >= r.cfg.Grace || !busy || p.readyAt.After(p.removedAt) {
					s := now.Sub(later(p.created, origin)).Seconds()
					r.res.ReplicaSeconds += s
					r.res.PoolSeconds[pl] += s
					delete(r.inbound, p)
					continue
				}
			}
			kept = append(kept, p)
		}
		r.pools[pl] = kept
	}
}

// scrape reads every Ready replica of a pool, as replay.scrape does, with
// its ITL histogram.
func (r *disaggReplay) scrape(pl Pool, now time.Time) {
	for _, p := range r.pools[pl] {
		p.scrape(now, r.cfg.Profile.KVCacheTokens)
	}
}

// sync is one HPA sync of each pool: the policy's recommendations through
// each pool's HPA behavior.
func (r *disaggReplay) sync(now time.Time) error {
	var v DisaggView
	v.Now = now
	for pl := range numPools {
		v.Pools[pl] = View{Now: now, Spec: r.hpa[pl].spec}
		for _, p := range r.pools[pl] {
			if p.removedAt.IsZero() {
				v.Pools[pl].Pods = append(v.Pools[pl].Pods, p.view(now))
			}
		}
	}
	want, ok := r.cfg.Policy.Recommend(v)
	changed := [2]int{}
	for pl := range numPools {
		w := want[pl]
		if !ok[pl] {
			w = r.hpa[pl].spec
		}
		before := r.hpa[pl].spec
		after := r.hpa[pl].decide(now, w)
		r.res.PoolDesired[pl] = append(r.res.PoolDesired[pl], after)
		switch {
		case after > before:
			changed[0]++
			for range after - before {
				if err := r.addPod(Pool(pl), now, false); err != nil {
					return err
				}
			}
		case after < before:
			changed[1]++
			r.removePods(Pool(pl), now, before-after)
		}
	}
	if changed[0] > 0 {
		r.res.Ups++
	}
	if changed[1] > 0 {
		r.res.Downs++
	}
	r.res.Desired = append(r.res.Desired, r.hpa[Prefill].spec+r.hpa[Decode].spec)
	r.res.Ready = append(r.res.Ready, v.Pools[Prefill].Ready()+v.Pools[Decode].Ready())
	return nil
}

// removePods takes n replicas of a pool out of service as replay.remove
// does: the ones not Ready first, then the newest.
func (r *disaggReplay) removePods(pl Pool, now time.Time, n int) {
	var live []*pod
	for _, p := range r.pools[pl] {
		if p.removedAt.IsZero() {
			live = append(live, p)
		}
	}
	slices.SortStableFunc(live, func(a, b *pod) int {
		if la, lb := a.readyAt.After(now), b.readyAt.After(now); la != lb {
			if la {
				return -1
			}
			return 1
		}
		return b.created.Compare(a.created)
	})
	for _, p := range live[:min(n, len(live))] {
		p.removedAt = now
	}
}

func live(pods []*pod) int {
	n := 0
	for _, p := range pods {
		if p.removedAt.IsZero() {
			n++
		}
	}
	return n
}

func (r *disaggReplay) finish(end time.Time) DisaggResult {
	for pl := range numPools {
		for _, p := range r.pools[pl] {
			s := end.Sub(later(p.created, origin)).Seconds()
			r.res.ReplicaSeconds += s
			r.res.PoolSeconds[pl] += s
		}
	}
	// Every request in flight finishes, to measure its first token and
	// gaps (the bill stops at the trace's end).
	for at := end; at.Before(end.Add(time.Hour)); at = at.Add(tick) {
		r.advance(Prefill, at)
		r.handOver(at)
		_ = r.admit(at)
		r.advance(Decode, at)
		if len(r.waiting) == 0 && r.drained() {
			break
		}
	}
	if r.cfg.Policy == nil {
		r.res.Peak = r.cfg.Initial[Prefill] + r.cfg.Initial[Decode]
		r.res.PoolPeak = r.cfg.Initial
	}
	ttftMet, p90 := minutes(r.cfg.Requests, r.ttft, r.cfg.SLO)
	_, r.res.PrefillP90 = minutes(r.cfg.Requests, r.prefillDone, r.cfg.SLO)
	r.res.P90 = p90
	r.res.MetMinute = make([]bool, len(ttftMet))
	r.res.ITLP90 = make([]float64, len(ttftMet))
	for m := range ttftMet {
		q := math.NaN()
		if m < len(r.gaps) && len(r.gaps[m]) > 0 {
			slices.Sort(r.gaps[m])
			q = r.gaps[m][int(math.Ceil(0.9*float64(len(r.gaps[m]))))-1]
		}
		r.res.ITLP90[m] = q
		itlOK := math.IsNaN(q) || q <= r.cfg.ITLSLO.Seconds() // a minute without gaps misses nothing
		if ttftMet[m] {
			r.res.TTFTMet++
		}
		if itlOK && !math.IsNaN(p90[m]) {
			r.res.ITLMet++
		}
		r.res.MetMinute[m] = ttftMet[m] && itlOK
		if r.res.MetMinute[m] {
			r.res.MinutesMet++
		}
	}
	r.res.Rejected, r.res.Unserved = outcomes(r.ttft)
	return r.res
}

// drained reports whether no replica holds a request.
func (r *disaggReplay) drained() bool {
	for pl := range numPools {
		for _, p := range r.pools[pl] {
			if st := p.e.Peek(); st.Running+st.Waiting > 0 {
				return false
			}
			if in := r.inbound[p]; in != nil && len(in.pending) > 0 {
				return false
			}
		}
	}
	return true
}

// vllmITLBounds are vLLM's inter-token latency buckets
// (inter_token_latency_seconds).
var vllmITLBounds = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
	1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, math.Inf(1)}
