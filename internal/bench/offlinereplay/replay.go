// Package offlinereplay replays a trace against simulated replicas under an
// emulated HorizontalPodAutoscaler, in virtual time: an hour of traffic
// takes seconds, not the bench's twelve minutes. It is for designing
// autoscaling signals and sweeping their choices; the bench
// (internal/bench/autoscalebench), with the real control plane, HPA controller
// and adapter, is what measures them.
//
// What it emulates: replicas are pkg/inferencesim engines (the bench's),
// Ready a start-up time after they are created; requests go round-robin to
// the Ready ones, as simworld routes them; every scrape interval each Ready
// replica's gauges and cumulative prefill-time histogram are read; every
// HPA sync a Policy recommends replicas and the HPA controller's
// stabilization windows and rate policies turn that into the Deployment's
// replicas; a removed replica takes no new requests and drains for its
// grace period. A replica is billed from creation until it is gone.
package offlinereplay

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/autoscalebench"
	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// PodView is what a policy sees of one pod at an HPA sync.
type PodView struct {
	Name             string
	Created, ReadyAt time.Time // ReadyAt zero: not Ready yet
	Ready, Loading   bool
	// Data: the values below are from a scrape (Ready pods only).
	Data             bool
	Running, Waiting int
	KVUsage          float64 // 0-1
	// Prefill is the cumulative histogram of finished requests' prefill
	// times that a vLLM server exports, in its buckets.
	Prefill *histogram.Histogram
	// TTFT is the cumulative histogram of times to first token
	// (vllm:time_to_first_token_seconds), in vLLM's buckets.
	TTFT *histogram.Histogram
	// ITL is the cumulative histogram of token gaps
	// (vllm:inter_token_latency_seconds), in vLLM's buckets; a
	// disaggregated replay's only.
	ITL *histogram.Histogram
	// Completed, PromptTokens and GenerationTokens are vLLM's counters
	// request_success_total, prompt_tokens_total and
	// generation_tokens_total since the replica started.
	Completed, PromptTokens, GenerationTokens float64
	// PromptLengths and OutputLengths are the finished requests' token
	// counts (vllm:request_prompt_tokens, vllm:request_generation_tokens),
	// cumulative, in vLLM's 1-2-5 buckets.
	PromptLengths, OutputLengths *histogram.Histogram
	// BusyTime is the time the replica's batch was not empty since it
	// started; GPUUtilization its share of the time since the previous
	// scrape, in percent, as the exporter reports the replica's GPU.
	BusyTime       time.Duration
	GPUUtilization float64
	// KVCacheTokens is the replica's KV cache in tokens
	// (vllm:cache_config_info's num_gpu_blocks x block_size).
	KVCacheTokens int
}

// View is what a policy sees at an HPA sync.
type View struct {
	Now  time.Time
	Pods []PodView // existing and not being removed
	Spec int       // the Deployment's replicas
}

// Ready counts v's Ready pods.
func (v View) Ready() int {
	n := 0
	for _, p := range v.Pods {
		if p.Ready {
			n++
		}
	}
	return n
}

// Policy gives the HPA's recommendation at a sync, before its behavior:
// replicas, or ok false for a metric error (the HPA keeps its replicas).
type Policy interface {
	Recommend(v View) (replicas int, ok bool)
}

// Config is one replay.
type Config struct {
	Requests []trace.Request
	Profile  inferencesim.Profile
	SLO      time.Duration
	// ModelLoad and StartDelay (scheduling, container start) add up to a
	// new replica's start-up time.
	ModelLoad, StartDelay time.Duration
	// Grace is how long a removed replica finishes the requests it holds.
	Grace time.Duration
	// Terminate, when set, replaces Grace with how a removed replica's
	// server ends, as its pod template says: it serves what it holds
	// for the preStop sleep, then vLLM aborts what is left at SIGTERM
	// (Result.Aborted counts it).
	Terminate *Termination
	// Victims says which replicas a scale-down removes.
	Victims Victims
	// Initial replicas are Ready when the replay starts.
	Initial int
	// Scrape and Sync are the adapter's scrape interval and the HPA's sync
	// period; the first sync is at SyncPhase.
	Scrape, Sync, SyncPhase time.Duration
	Behavior                Behavior
	// Policy decides at each sync; nil: Initial replicas throughout.
	Policy Policy
}

// Result is what a replay measured.
type Result struct {
	// MetMinute says, per trace minute, whether its TTFT p90 (P90, in
	// seconds) was within the SLO; MinutesMet counts them.
	MetMinute  []bool
	P90        []float64 // seconds
	MinutesMet int
	// ReplicaSeconds is the GPU time billed.
	ReplicaSeconds float64
	// Ups and Downs count the syncs that changed the Deployment's
	// replicas; Peak is the most replicas that existed at once.
	Ups, Downs, Peak int
	// Unserved counts requests that never got a first token; Rejected
	// those no replica could hold (larger than its KV cache), which count
	// in no minute (autoscalebench.RequestOutcome.Rejected).
	Unserved, Rejected int
	// Desired and Ready are the replicas after, and Ready at, each sync.
	Desired, Ready []int
	// With Config.Terminate: Aborted counts the requests removed replicas
	// held when their servers were killed, AbortedStreams those of them
	// that had streamed their first token, and DownStreams the streams
	// cut by each scale-down, in order (one entry per scale-down).
	Aborted, AbortedStreams int
	DownStreams             []int
}

// Termination is how a removed replica ends (simworld's rules, with the
// endpoint removed at once): PreStop is its pod template's preStop sleep,
// zero for a template without one, where vLLM aborts at SIGTERM.
type Termination struct {
	PreStop time.Duration
}

// origin is the replay's virtual time zero.
var origin = time.Unix(0, 0)

// rejected marks in replay.ttft a request the replica refused.
const rejected = -2

// tick is the replay's step: arrivals are submitted at their own instants,
// everything else happens on whole ticks.
const tick = time.Second

type replay struct {
	cfg     Config
	pods    []*pod
	created int
	next    int // the next request to dispatch
	rr      int // round-robin position
	ttft    []time.Duration
	hpa     hpa
	res     Result
}

// Run replays cfg.
func Run(cfg Config) (Result, error) {
	if len(cfg.Requests) == 0 || cfg.Scrape <= 0 || cfg.Sync <= 0 || cfg.Initial < 1 {
		return Result{}, errors.New("offlinereplay: need requests, a scrape interval, a sync period and an initial replica")
	}
	r := &replay{cfg: cfg, ttft: make([]time.Duration, len(cfg.Requests)), hpa: newHPA(cfg.Behavior, cfg.Initial)}
	for i := range r.ttft {
		r.ttft[i] = -1
	}
	for range cfg.Initial {
		if err := r.addPod(origin, true); err != nil {
			return Result{}, err
		}
	}
	end := cfg.Requests[len(cfg.Requests)-1].At + tick
	for t := time.Duration(0); t <= end; t += tick {
		now := origin.Add(t)
		if err := r.dispatch(t); err != nil {
			return Result{}, err
		}
		r.retire(now)
		if t%cfg.Scrape == 0 {
			r.scrape(now)
		}
		r.res.Peak = max(r.res.Peak, r.live())
		if cfg.Policy != nil && t >= cfg.SyncPhase && (t-cfg.SyncPhase)%cfg.Sync == 0 {
			if err := r.sync(now); err != nil {
				return Result{}, err
			}
		}
	}
	return r.finish(origin.Add(end)), nil
}

// dispatch submits the requests that arrive before t to the Ready
// replicas in turn; with none Ready a request is lost.
func (r *replay) dispatch(t time.Duration) error {
	for ; r.next < len(r.cfg.Requests) && r.cfg.Requests[r.next].At < t; r.next++ {
		req := r.cfg.Requests[r.next]
		at := origin.Add(req.At)
		var ready []*pod
		for _, p := range r.pods {
			if p.removedAt.IsZero() && !p.readyAt.After(at) {
				ready = append(ready, p)
			}
		}
		if len(ready) == 0 {
			continue
		}
		p := ready[r.rr%len(ready)]
		r.rr++
		i := r.next
		sim := inferencesim.Request{ContextTokens: req.ContextTokens, GeneratedTokens: req.GeneratedTokens}
		err := p.e.SubmitNotify(at, sim, func(d time.Duration) { r.ttft[i] = d })
		switch {
		case errors.Is(err, inferencesim.ErrInvalidRequest):
			r.ttft[i] = rejected // refused at once, as vLLM answers HTTP 400
		case err != nil:
			return fmt.Errorf("offlinereplay: request %d: %w", i, err)
		}
	}
	return nil
}

// retire advances every replica to now and bills the removed ones that
// have drained, or whose grace period is over, or that never served.
func (r *replay) retire(now time.Time) {
	kept := r.pods[:0]
	for _, p := range r.pods {
		if !p.removedAt.IsZero() && r.cfg.Terminate != nil {
			if end := p.removedAt.Add(r.cfg.Terminate.PreStop); !now.Before(end) {
				p.e.Advance(end) // no further than SIGTERM: a tick may overshoot it
				r.kill(p, end)
				continue
			}
			p.e.Advance(now)
			kept = append(kept, p)
			continue
		}
		p.e.Advance(now)
		if !p.removedAt.IsZero() {
			st := p.e.Peek()
			if now.Sub(p.removedAt) >= r.cfg.Grace || st.Running+st.Waiting == 0 || p.readyAt.After(p.removedAt) {
				r.res.ReplicaSeconds += now.Sub(later(p.created, origin)).Seconds()
				continue
			}
		}
		kept = append(kept, p)
	}
	r.pods = kept
}

// scrape reads every Ready replica.
func (r *replay) scrape(now time.Time) {
	for _, p := range r.pods {
		p.scrape(now, r.cfg.Profile.KVCacheTokens)
	}
}

// sync is one HPA sync: the policy's recommendation through the HPA's
// behavior onto the Deployment.
func (r *replay) sync(now time.Time) error {
	v := View{Now: now, Spec: r.hpa.spec}
	for _, p := range r.pods {
		if p.removedAt.IsZero() {
			v.Pods = append(v.Pods, p.view(now))
		}
	}
	want, ok := r.cfg.Policy.Recommend(v)
	if !ok {
		want = r.hpa.spec
	}
	before := r.hpa.spec
	after := r.hpa.decide(now, want)
	r.res.Desired = append(r.res.Desired, after)
	r.res.Ready = append(r.res.Ready, v.Ready())
	switch {
	case after > before:
		r.res.Ups++
		for range after - before {
			if err := r.addPod(now, false); err != nil {
				return err
			}
		}
	case after < before:
		r.res.Downs++
		if r.cfg.Terminate != nil {
			r.res.DownStreams = append(r.res.DownStreams, 0)
		}
		r.remove(now, before-after)
	}
	return nil
}

func (r *replay) live() int {
	n := 0
	for _, p := range r.pods {
		if p.removedAt.IsZero() {
			n++
		}
	}
	return n
}

// kill ends removed replica p's server at SIGTERM, at: vLLM aborts what
// it holds. It is billed until then.
func (r *replay) kill(p *pod, at time.Time) {
	out := p.e.Abort()
	r.res.Aborted += out.Requests
	r.res.AbortedStreams += out.Streams
	r.res.DownStreams[p.down] += out.Streams
	r.res.ReplicaSeconds += at.Sub(later(p.created, origin)).Seconds()
}

func (r *replay) finish(end time.Time) Result {
	kept := r.pods[:0]
	for _, p := range r.pods {
		if !p.removedAt.IsZero() && r.cfg.Terminate != nil {
			at := p.removedAt.Add(r.cfg.Terminate.PreStop)
			p.e.Advance(at)
			r.kill(p, at)
			continue
		}
		kept = append(kept, p)
	}
	r.pods = kept
	for _, p := range r.pods {
		r.res.ReplicaSeconds += end.Sub(later(p.created, origin)).Seconds()
		p.e.Advance(end.Add(time.Hour))
	}
	if r.cfg.Policy == nil {
		r.res.Peak = r.cfg.Initial
	}
	r.res.MetMinute, r.res.P90 = minutes(r.cfg.Requests, r.ttft, r.cfg.SLO)
	for _, ok := range r.res.MetMinute {
		if ok {
			r.res.MinutesMet++
		}
	}
	r.res.Rejected, r.res.Unserved = outcomes(r.ttft)
	return r.res
}

// minutes is each trace minute's TTFT p90 in seconds, computed as the
// bench's report does (autoscalebench.MinuteP90: NaN for a minute without
// arrivals, +Inf where the p90 falls on a request never served), and
// whether it is within slo.
func minutes(reqs []trace.Request, ttft []time.Duration, slo time.Duration) ([]bool, []float64) {
	rec := autoscalebench.PolicyRecording{Requests: make([]autoscalebench.RequestOutcome, len(reqs))}
	for i, r := range reqs {
		rec.Requests[i] = autoscalebench.RequestOutcome{Arrival: r.At, TTFT: max(ttft[i], 0), Served: ttft[i] >= 0, Rejected: ttft[i] == rejected}
	}
	p90 := autoscalebench.MinuteP90(rec, (reqs[len(reqs)-1].At/time.Minute+1)*time.Minute)
	met := make([]bool, len(p90))
	for m, p := range p90 {
		met[m] = p <= slo.Seconds() // false for NaN
	}
	return met, p90
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// MinuteNeed is, for each trace minute, the fewest always-ready replicas
// (up to limit) that meet the SLO in it when they serve the whole trace
// from the start: what the clairvoyant reference asks for. A minute no
// such count meets needs limit.
func MinuteNeed(reqs []trace.Request, prof inferencesim.Profile, slo time.Duration, limit int) ([]int, error) {
	if len(reqs) == 0 {
		return nil, errors.New("offlinereplay: no requests")
	}
	need := make([]int, int(reqs[len(reqs)-1].At/time.Minute)+1)
	for n := 1; n <= limit; n++ {
		res, err := Run(Config{Requests: reqs, Profile: prof, SLO: slo, Initial: n,
			Scrape: 5 * time.Second, Sync: 15 * time.Second, Grace: 30 * time.Second})
		if err != nil {
			return nil, err
		}
		done := true
		for m := range need {
			// A minute without arrivals (its p90 NaN) needs nothing.
			if need[m] == 0 && (m >= len(res.MetMinute) || res.MetMinute[m] || math.IsNaN(res.P90[m])) {
				need[m] = n
			}
			done = done && need[m] != 0
		}
		if done {
			break
		}
	}
	for m := range need {
		if need[m] == 0 {
			need[m] = limit
		}
	}
	return need, nil
}

// outcomes counts the requests rejected (larger than any replica holds) and
// those never served among ttft, whose entries are -1 or rejected for them.
func outcomes(ttft []time.Duration) (rejectedN, unserved int) {
	for _, d := range ttft {
		switch {
		case d == rejected:
			rejectedN++
		case d < 0:
			unserved++
		}
	}
	return rejectedN, unserved
}
