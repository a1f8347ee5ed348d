// Package robustness replays every autoscaling policy on a family of
// traffic shapes the signals were not designed on (internal/bench/workload) and
// on the project's recorded workloads, in the offline replay's virtual
// time, and checks the recommended policy against stated goals: the
// robustness table of docs/autoscaling.md.
package robustness

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/autoscalebench"
	"github.com/gpuscale/gpuscale/internal/bench/offlinereplay"
	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/internal/bench/workload"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

// Workload is one trace to replay, at one SLO.
type Workload struct {
	Name, About string
	// Bursty workloads have lulls or bursts; the goals ask more of them.
	Bursty   bool
	Requests []trace.Request
	// SLO is the TTFT p90 each minute is judged on; 0: the ladder rule
	// (SLOLadder).
	SLO time.Duration
}

// SLOLadder are the SLOs a shape may be judged on, in a 1-2-5 series; a
// shape's is the first at which enough static replicas meet the SLO in at
// least ReachableShare of its minutes: an SLO a fleet can keep, not one
// its prompts' prefill times alone rule out.
var SLOLadder = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second, 50 * time.Second}

// ReachableShare is the share of minutes the ladder's SLO must let static
// provisioning meet.
const ReachableShare = 0.9

// Seed draws the family's traces.
const Seed = 2026

// MaxStatic bounds the static sizing.
const MaxStatic = 64

// Family returns the family's shapes as workloads, judged at the ladder's
// SLO.
func Family() []Workload { return FamilyDrawn(Seed) }

// FamilyDrawn is Family drawn with another seed: the same shapes, traffic
// no default was ever looked at on.
func FamilyDrawn(seed uint64) []Workload {
	var out []Workload
	for _, s := range workload.Family() {
		out = append(out, Workload{Name: s.Name, About: s.About, Bursty: s.Bursty, Requests: s.Generate(seed)})
	}
	return out
}

// Recorded returns the project's three workloads from dir (test/traces),
// at the bench's SLO of one second.
func Recorded(dir string) ([]Workload, error) {
	var out []Workload
	for _, w := range []struct {
		name, file, about string
		bursty            bool
	}{
		{"conversation-hour", "azure-llm-inference-2023-conv.csv", "the recorded hour of Azure's conversation service", true},
		{"burst", "synthetic-burst.csv", workload.Burst().About, true},
		{"code-completion", "synthetic-code-completion.csv", workload.CodeCompletion().About, false},
	} {
		t, err := trace.ReadFile(dir + "/" + w.file)
		if err != nil {
			return nil, err
		}
		out = append(out, Workload{Name: w.name, About: w.about, Bursty: w.bursty, Requests: t.Requests, SLO: time.Second})
	}
	return out, nil
}

// Setup is the replay's fixed part: the replicas and the cluster's timers,
// the bench's.
type Setup struct {
	Profile                     inferencesim.Profile
	ModelLoad, StartDelay       time.Duration
	Grace, Scrape, Sync, Phase  time.Duration
	GPUUtil, QueueDepth, RunReq float64
	// MaxOfStatic bounds every autoscaled policy's replicas at this
	// multiple of static provisioning's, rounded up: 1 by default, an HPA
	// whose maxReplicas is the fleet its owner would otherwise provision,
	// as the README advises; 2 gives room to overshoot.
	MaxOfStatic float64
	// Tweak, when set, changes the policies' options (sweeps).
	Tweak func(*offlinereplay.PolicyOptions)
	// SequentialNeed gives the clairvoyant and reactive references
	// offlinereplay.SequentialNeed's needs instead of MinuteNeed's.
	SequentialNeed bool
}

// Needs is each minute's need (up to limit replicas) that the clairvoyant
// and reactive references ask for: offlinereplay.SequentialNeed's when
// SequentialNeed is set, MinuteNeed's otherwise.
func (s Setup) Needs(reqs []trace.Request, slo time.Duration, limit int) ([]int, error) {
	if s.SequentialNeed {
		return offlinereplay.SequentialNeed(reqs, s.Profile, slo, limit)
	}
	return offlinereplay.MinuteNeed(reqs, s.Profile, slo, limit)
}

// DefaultSetup is the bench's: L4 replicas that load for a minute, a 5 s
// scrape, a 15 s HPA sync, and its HPA targets.
func DefaultSetup() Setup {
	return Setup{Profile: inferencesim.L4Profile(), ModelLoad: time.Minute, StartDelay: autoscalebench.Scheduling,
		Grace: 30 * time.Second, Scrape: 5 * time.Second, Sync: 15 * time.Second, Phase: 7 * time.Second,
		GPUUtil: 70, QueueDepth: 1, RunReq: 16, MaxOfStatic: 1}
}

// Outcome is one policy on one workload.
type Outcome struct {
	Policy string
	offlinereplay.Result
	// GPUHours is the bill; StaticFraction and ClairvoyantFraction divide
	// it by static's and by the clairvoyant reference's.
	GPUHours, StaticFraction, ClairvoyantFraction float64
	// Minutes had arrivals; ScaleEvents counts ups and downs.
	Minutes, ScaleEvents int
}

// Report is every policy on one workload.
type Report struct {
	Workload Workload
	SLO      time.Duration
	// Static is static provisioning's size; Reachable the minutes it
	// meets.
	Static, Reachable int
	Outcomes          []Outcome
}

// Outcome returns the named policy's outcome.
func (r Report) Outcome(policy string) (Outcome, bool) {
	for _, o := range r.Outcomes {
		if o.Policy == policy {
			return o, true
		}
	}
	return Outcome{}, false
}

// Run replays policies on every workload, as many at once as there are
// cores, and returns a report per workload in their order.
func Run(ws []Workload, policies []string, setup Setup) ([]Report, error) {
	reports := make([]Report, len(ws))
	errs := make([]error, len(ws))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			reports[i], errs[i] = runOne(w, policies, setup)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ws[i].Name, err)
		}
	}
	return reports, nil
}

// ChooseSLO is w's SLO and static provisioning's size and met minutes at
// it: w.SLO if set, else the ladder's first SLO that static provisioning
// meets in ReachableShare of the minutes.
func ChooseSLO(w Workload, prof inferencesim.Profile) (slo time.Duration, static, met int, err error) {
	ladder := SLOLadder
	if w.SLO > 0 {
		ladder = []time.Duration{w.SLO}
	}
	for _, slo := range ladder {
		n, met, minutes, err := autoscalebench.StaticNeed(w.Requests, prof, slo, MaxStatic)
		if err != nil && w.SLO == 0 {
			continue // no minute met at all: too tight
		}
		if err != nil {
			return 0, 0, 0, err
		}
		if w.SLO > 0 || float64(met) >= ReachableShare*float64(minutes) {
			return slo, n, met, nil
		}
	}
	return 0, 0, 0, fmt.Errorf("no SLO up to %v is met in %.0f%% of the minutes", SLOLadder[len(SLOLadder)-1], 100*ReachableShare)
}

func runOne(w Workload, policies []string, s Setup) (Report, error) {
	slo, static, met, err := ChooseSLO(w, s.Profile)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Workload: w, SLO: slo, Static: static, Reachable: met}
	initial, _, _, err := autoscalebench.StaticNeed(sliceTo(w.Requests, time.Minute), s.Profile, slo, MaxStatic)
	if err != nil {
		initial = 1
	}
	opts := offlinereplay.PolicyOptions{
		Targets: autoscalebench.Targets{GPUUtilization: s.GPUUtil, QueueDepth: s.QueueDepth, RequestsRunning: s.RunReq,
			TTFT: slo, ModelLoad: s.ModelLoad, Startup: s.ModelLoad + s.StartDelay},
		MaxReplicas: max(1, int(math.Ceil(s.MaxOfStatic*float64(static)))),
	}
	if s.Tweak != nil {
		s.Tweak(&opts)
	}
	if slices.Contains(policies, offlinereplay.PolicyClairvoyant) || slices.Contains(policies, offlinereplay.PolicyReactive) {
		if opts.Need, err = s.Needs(w.Requests, slo, static); err != nil {
			return Report{}, err
		}
	}
	var staticSec, clairSec float64
	// Every fraction is of static's bill: static is replayed even when
	// not asked for, and then left out of the outcomes.
	replayed := policies
	askedStatic := slices.Contains(policies, autoscalebench.PolicyStatic)
	if !askedStatic {
		replayed = append([]string{autoscalebench.PolicyStatic}, policies...)
	}
	for _, name := range replayed {
		p, b, err := offlinereplay.NewPolicy(name, opts)
		if err != nil {
			return Report{}, err
		}
		cfg := offlinereplay.Config{Requests: w.Requests, Profile: s.Profile, SLO: slo, ModelLoad: s.ModelLoad,
			StartDelay: s.StartDelay, Grace: s.Grace, Initial: initial, Scrape: s.Scrape, Sync: s.Sync, SyncPhase: s.Phase,
			Behavior: b, Policy: p}
		if p == nil {
			cfg.Initial = static
		}
		res, err := offlinereplay.Run(cfg)
		if err != nil {
			return Report{}, fmt.Errorf("%s: %w", name, err)
		}
		o := Outcome{Policy: name, Result: res, GPUHours: res.ReplicaSeconds / 3600, ScaleEvents: res.Ups + res.Downs}
		for m := range res.P90 {
			if !math.IsNaN(res.P90[m]) {
				o.Minutes++
			}
		}
		switch name {
		case autoscalebench.PolicyStatic:
			staticSec = res.ReplicaSeconds
			if !askedStatic {
				continue
			}
		case offlinereplay.PolicyClairvoyant:
			clairSec = res.ReplicaSeconds
		}
		rep.Outcomes = append(rep.Outcomes, o)
	}
	for i := range rep.Outcomes {
		o := &rep.Outcomes[i]
		o.StaticFraction = ratio(o.ReplicaSeconds, staticSec)
		o.ClairvoyantFraction = ratio(o.ReplicaSeconds, clairSec)
	}
	return rep, nil
}

func sliceTo(reqs []trace.Request, d time.Duration) []trace.Request {
	i, _ := slices.BinarySearchFunc(reqs, d, func(r trace.Request, d time.Duration) int {
		switch {
		case r.At < d:
			return -1
		case r.At > d:
			return 1
		}
		return 0
	})
	return reqs[:max(i, 1)]
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return math.NaN()
	}
	return a / b
}
