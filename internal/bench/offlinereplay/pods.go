package offlinereplay

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gpuscale/gpuscale/pkg/inferencesim"
	"github.com/gpuscale/gpuscale/pkg/scaledown"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// pod is one replica.
type pod struct {
	name                        string
	e                           *inferencesim.Engine
	created, readyAt, removedAt time.Time
	// Cumulative histograms, as vLLM exports them; itl only in a
	// disaggregated replay.
	prefill, ttft, prompts, outputs *histogram.Histogram
	itl                             *histogram.Histogram
	last                            PodView // the newest scrape
	down                            int     // the scale-down that removed it (Result.DownStreams)
	lastScrape                      time.Time
}

// scrape reads the replica as a scrape at now would, if it is Ready and
// not removed: its utilization since the last scrape, its queue, KV use
// and cumulative histograms (ITL only where it keeps one).
func (p *pod) scrape(now time.Time, kvCacheTokens int) {
	if p.readyAt.After(now) || !p.removedAt.IsZero() {
		return
	}
	st := p.e.Peek()
	util := 0.0
	if since := now.Sub(p.lastScrape); !p.lastScrape.IsZero() && since > 0 {
		util = 100 * min(1, float64(st.BusyTime-p.last.BusyTime)/float64(since))
	}
	p.lastScrape = now
	p.last = PodView{Data: true, GPUUtilization: util, Running: st.Running, Waiting: st.Waiting, KVUsage: st.KVCacheUsage,
		Prefill: p.prefill.Clone(), TTFT: p.ttft.Clone(), PromptLengths: p.prompts.Clone(), OutputLengths: p.outputs.Clone(),
		Completed: float64(st.Completed), PromptTokens: float64(st.PromptTokens), GenerationTokens: float64(st.GenerationTokens),
		BusyTime: st.BusyTime, KVCacheTokens: kvCacheTokens}
	if p.itl != nil {
		p.last.ITL = p.itl.Clone()
	}
}

// view is the replica as the HPA's policy sees it at now: loading, or
// Ready with its newest scrape.
func (p *pod) view(now time.Time) PodView {
	if p.readyAt.After(now) {
		return PodView{Name: p.name, Created: p.created, Loading: true}
	}
	pv := p.last
	pv.Name, pv.Created, pv.Ready, pv.ReadyAt = p.name, p.created, true, p.readyAt
	return pv
}

// addPod creates a replica at at: Ready at once for the initial ones
// (loaded before the replay, so their start-up is measured as the others'),
// else after its start-up time.
func (r *replay) addPod(at time.Time, initial bool) error {
	e, err := inferencesim.NewEngine(r.cfg.Profile, func() time.Time { return at })
	if err != nil {
		return err
	}
	startup := r.cfg.StartDelay + r.cfg.ModelLoad
	p := &pod{name: fmt.Sprintf("llm-%05d", r.created), e: e, created: at, readyAt: at.Add(startup),
		prefill: newHistogram(vllmLatencyBounds), ttft: newHistogram(vllmTTFTBounds),
		prompts: newHistogram(vllmTokenBounds), outputs: newHistogram(vllmTokenBounds)}
	if initial {
		p.created, p.readyAt = at.Add(-startup), at
	}
	r.created++
	// vLLM observes a request's TTFT at its first token, and its prefill
	// time and lengths when it finishes.
	e.SetHooks(inferencesim.Hooks{
		FirstToken: func(d time.Duration) { observe(p.ttft, d.Seconds()) },
		Finished: func(c inferencesim.Completion) {
			observe(p.prefill, (c.FirstToken - c.Queued).Seconds())
			observe(p.prompts, float64(c.ContextTokens))
			observe(p.outputs, float64(c.GeneratedTokens))
		},
	})
	r.pods = append(r.pods, p)
	return nil
}

// Victims is which replicas a scale-down removes, after those not Ready
// (which a ReplicaSet always removes first).
type Victims int

const (
	// VictimsNewest is the ReplicaSet's own order, today's for a
	// Deployment whose pods carry no load-aware deletion cost: the newest
	// first.
	VictimsNewest Victims = iota
	// VictimsIdlest is the order gpuscale's scale-down controller gives
	// the replicas of a node through their deletion costs: by
	// scaledown.LoadRank of the last scrape (fewest requests in flight,
	// then the least KV cache in use), then by name.
	VictimsIdlest
)

// remove takes n replicas out of service as a ReplicaSet scales down: the
// ones not Ready first, then in the order cfg.Victims says.
func (r *replay) remove(now time.Time, n int) {
	var live []*pod
	for _, p := range r.pods {
		if p.removedAt.IsZero() {
			live = append(live, p)
		}
	}
	order := func(a, b *pod) int { return b.created.Compare(a.created) }
	if r.cfg.Victims == VictimsIdlest {
		order = func(a, b *pod) int {
			return cmp.Or(cmp.Compare(rankOf(a), rankOf(b)), cmp.Compare(a.name, b.name))
		}
	}
	slices.SortStableFunc(live, func(a, b *pod) int {
		if la, lb := a.readyAt.After(now), b.readyAt.After(now); la != lb {
			if la {
				return -1
			}
			return 1
		}
		return order(a, b)
	})
	for _, p := range live[:min(n, len(live))] {
		p.removedAt = now
		p.down = max(len(r.res.DownStreams)-1, 0)
	}
}

// rankOf is p's load rank from its last scrape, as the controller reads
// it from the adapter: the newest sample, seconds old.
func rankOf(p *pod) int {
	if !p.last.Data {
		return scaledown.LoadRank(math.MaxInt32, -1) // unknown load never passes for idle
	}
	return scaledown.LoadRank(float64(p.last.Running+p.last.Waiting), 100*p.last.KVUsage)
}

// vllmLatencyBounds are vLLM's request-latency buckets, its prefill-time
// histogram's (vllm/v1/metrics/loggers.py).
var vllmLatencyBounds = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
	40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0, math.Inf(1)}

// vllmTTFTBounds are vLLM's time-to-first-token buckets.
var vllmTTFTBounds = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
	0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0, math.Inf(1)}

// vllmTokenBounds are vLLM's 1-2-5 token-count buckets up to a 32k-token
// max_model_len.
var vllmTokenBounds = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, math.Inf(1)}

func newHistogram(bounds []float64) *histogram.Histogram {
	return &histogram.Histogram{Bounds: bounds, Counts: make([]float64, len(bounds))}
}

func observe(h *histogram.Histogram, v float64) {
	for i, b := range h.Bounds {
		if v <= b {
			h.Counts[i]++
		}
	}
	h.Sum += v
	h.Count++
}
