package offlinereplay

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/autoscalebench"
	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
	"github.com/gpuscale/gpuscale/pkg/signal/capacity"
)

// DisaggBench is the disaggregated workload's comparison: static
// provisioning of both pools sized in hindsight (StaticDisagg), and each
// autoscaled policy starting from InitialPools.
type DisaggBench struct {
	// Config is the replay's setup; its Initial, Behavior and Policy are
	// set per policy.
	Config DisaggConfig
	// Limit bounds static's pools; every autoscaled pool may reach
	// static's, as the README's HPA's maxReplicas is static provisioning's
	// fleet.
	Limit int
	// InitialPools are the autoscaled policies' replicas at the start.
	InitialPools [numPools]int
	Policies     []string
	// Parts, when set, is called with every capacity estimate of every
	// autoscaled policy (DisaggOptions.Parts), after the policy's name.
	Parts func(policy string, now time.Time, pool string, e capacity.Estimate)
}

// NewDisaggBench is the bench's setup for reqs: the L4 profile, the bench's
// start-up (a minute's model load after 3 s of scheduling), scrape
// interval, HPA sync and grace, and KV caches over 25 Gb/s (DefaultKVTransfer),
// judged at TTFT p90 slo and ITL p90 itl.
func NewDisaggBench(reqs []trace.Request, slo, itl time.Duration) DisaggBench {
	return DisaggBench{
		Config: DisaggConfig{Requests: reqs, Profile: inferencesim.L4Profile(), SLO: slo, ITLSLO: itl,
			ModelLoad: time.Minute, StartDelay: autoscalebench.Scheduling, Grace: 30 * time.Second, Transfer: DefaultKVTransfer(),
			Scrape: 5 * time.Second, Sync: 15 * time.Second, SyncPhase: 7 * time.Second},
		Limit: 20, InitialPools: [numPools]int{2, 3}, Policies: DisaggPolicies,
	}
}

// maxReplicas is each autoscaled pool's HPA's maximum: static's pool, as
// the README's HPA holds a model to the fleet static provisioning would
// run, and never under the pool's start.
func (b DisaggBench) maxReplicas(static [numPools]int) (m [numPools]int) {
	for pl := range numPools {
		m[pl] = max(static[pl], b.InitialPools[pl])
	}
	return m
}

// DisaggOutcome is one policy's run.
type DisaggOutcome struct {
	Policy string
	Result DisaggResult
	// GPUHours is the bill of both pools; Share its ratio to static's.
	GPUHours, Share float64
}

// Run runs every policy; the first outcome is static's, whatever
// Policies says, and static's pools are the sizes it found.
func (b DisaggBench) Run() (static [numPools]int, out []DisaggOutcome, err error) {
	static, st, err := StaticDisagg(b.Config, b.Limit)
	if err != nil {
		return static, nil, err
	}
	out = append(out, DisaggOutcome{Policy: DisaggStatic, Result: st, GPUHours: st.ReplicaSeconds / 3600, Share: 1})
	cc := capacity.DefaultConfig()
	cc.Objective, cc.Window, cc.ITLObjective = b.Config.SLO, time.Minute, b.Config.ITLSLO
	for _, name := range b.Policies {
		if name == DisaggStatic {
			continue
		}
		// The behavior is `adapter recommend`'s for the model's load
		// time, as the robustness replay gives the recommended policy.
		o := DisaggOptions{Capacity: cc, Startup: b.Config.ModelLoad + b.Config.StartDelay, MaxReplicas: b.maxReplicas(static)}
		if b.Parts != nil {
			o.Parts = func(now time.Time, pool string, e capacity.Estimate) { b.Parts(name, now, pool, e) }
		}
		pol, beh, err := NewDisaggPolicy(name, o)
		if err != nil {
			return static, nil, err
		}
		c := b.Config
		c.Policy, c.Behavior, c.Initial = pol, beh, b.InitialPools
		r, err := RunDisagg(c)
		if err != nil {
			return static, nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, DisaggOutcome{Policy: name, Result: r, GPUHours: r.ReplicaSeconds / 3600, Share: r.ReplicaSeconds / st.ReplicaSeconds})
	}
	return static, out, nil
}

// DisaggTable is out as a markdown table.
func DisaggTable(static [numPools]int, out []DisaggOutcome) string {
	var b strings.Builder
	b.WriteString("| policy | minutes met (TTFT and ITL) | TTFT met | ITL met | GPU-hours (prefill + decode) | of static's | peak replicas (prefill, decode) | unserved |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, o := range out {
		r := o.Result
		name := o.Policy
		if name == DisaggStatic {
			name = fmt.Sprintf("static (%d prefill, %d decode)", static[Prefill], static[Decode])
		}
		fmt.Fprintf(&b, "| %s | %d/%d | %d | %d | %.2f (%.2f + %.2f) | %.0f%% | %d, %d | %d |\n", name, r.MinutesMet, minutesWith(r),
			r.TTFTMet, r.ITLMet, o.GPUHours, r.PoolSeconds[Prefill]/3600, r.PoolSeconds[Decode]/3600, 100*o.Share,
			r.PoolPeak[Prefill], r.PoolPeak[Decode], r.Unserved)
	}
	return b.String()
}

// Lost lists, for each autoscaled outcome, the minutes static's
// (out[0]) meets and it does not: the minute's TTFT p90, the prefill pool's
// part of it (arrival to the end of prefill), the ITL p90, and each pool's
// replicas as its HPA left them at the minute's last sync. Each line is what
// to read first when a policy loses a minute: which pool was short, and by
// how much of the objective.
func (b DisaggBench) Lost(out []DisaggOutcome) string {
	if len(out) == 0 {
		return ""
	}
	static := out[0].Result
	var sb strings.Builder
	for _, o := range out[1:] {
		r := o.Result
		var lost []string
		for m, ok := range r.MetMinute {
			if ok || m >= len(static.MetMinute) || !static.MetMinute[m] {
				continue
			}
			lost = append(lost, fmt.Sprintf("  minute %2d: TTFT p90 %.2fs (prefill %.2fs), ITL p90 %.0fms, replicas prefill %s decode %s",
				m, r.P90[m], at(r.PrefillP90, m), 1000*at(r.ITLP90, m),
				b.poolAt(r.PoolDesired[Prefill], m), b.poolAt(r.PoolDesired[Decode], m)))
		}
		fmt.Fprintf(&sb, "%s: %d of static's %d minutes lost\n", o.Policy, len(lost), static.MinutesMet)
		for _, l := range lost {
			sb.WriteString(l + "\n")
		}
	}
	return sb.String()
}

// poolAt is a pool's replicas after the last sync of minute m ("-" before
// its first): desired holds one entry a sync, the first at SyncPhase.
func (b DisaggBench) poolAt(desired []int, m int) string {
	sync := b.Config.Sync
	if sync <= 0 || len(desired) == 0 {
		return "-"
	}
	end := time.Duration(m+1)*time.Minute - b.Config.SyncPhase
	if end <= 0 {
		return "-"
	}
	i := min(int((end-1)/sync), len(desired)-1)
	return strconv.Itoa(desired[i])
}

// at is v[i], NaN past its end.
func at(v []float64, i int) float64 {
	if i < len(v) {
		return v[i]
	}
	return math.NaN()
}

// minutesWith counts r's minutes with arrivals.
func minutesWith(r DisaggResult) int {
	n := 0
	for _, p := range r.P90 {
		if !math.IsNaN(p) {
			n++
		}
	}
	return n
}

// liveProfile is NewDisaggBench's profile by the name the live bench's
// servers are given it (inferencesim.Profiles).
const liveProfile = "l4-llama-3.1-8b"

// Live is this bench's setup on the real control plane
// (autoscalebench.RunDisagg, `make bench-autoscale BENCH_FLAGS=--disaggregated`):
// the same requests, objectives, profile, model load, KV transfer and
// starting pools, static's pools as StaticDisagg sized them, every
// autoscaled pool up to static's, played speedup times faster than
// real time. A decode replica's link carries its caches at once there, not
// one after another; at 25 Gb/s a cache takes 40-60 ms, and a replica is
// handed a few a second.
func (b DisaggBench) Live(workload string, static [numPools]int, speedup float64) autoscalebench.DisaggConfig {
	return autoscalebench.DisaggConfig{
		Workload: workload, Requests: b.Config.Requests, Speedup: speedup,
		SLO: b.Config.SLO, ITLSLO: b.Config.ITLSLO, ModelLoad: b.Config.ModelLoad, Profile: liveProfile,
		Transfer:    b.Config.Transfer.Time,
		Static:      static,
		Initial:     b.InitialPools,
		MaxReplicas: b.maxReplicas(static),
		Policies:    autoscalebench.DisaggPolicies,
		SampleEvery: 5 * time.Second,
		Grace:       time.Minute,
	}
}
