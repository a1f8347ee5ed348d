// Package robustness replays every autoscaling policy on a family of
// traffic shapes the signals were not designed on (internal/bench/workload) and
// on the project's recorded workloads, in the offline replay's virtual
// time, and checks the recommended policy against stated goals: the
// robustness table of docs/autoscaling.md.
package robustness

import (
	"errors"
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
	// Need is how the clairvoyant and reactive references read each
	// minute's need: both readings, the better run kept, by default.
	Need NeedReading
}

// NeedReading is how the clairvoyant and reactive references read a
// minute's need. Neither reading is the cheapest schedule: MinuteNeed's
// static fleet over the whole trace carries a burst's backlog into the
// minutes after it, so it overstates them; SequentialNeed's minute-by-minute
// fleet leaves the next minute a queue that a fleet larger earlier would not
// have, so it overstates those (docs/autoscaling.md, "Round ten").
type NeedReading int

const (
	// NeedBest replays each reference on both readings and keeps the
	// better run: more SLO minutes, then fewer GPU-hours.
	NeedBest NeedReading = iota
	// NeedWholeTrace is offlinereplay.MinuteNeed's reading.
	NeedWholeTrace
	// NeedSequential is offlinereplay.SequentialNeed's reading.
	NeedSequential
)

// The readings' names, as Outcome.NeedReading and the tools give them.
const (
	ReadingWholeTrace = "whole-trace"
	ReadingSequential = "sequential"
	ReadingBest       = "best"
)

// ParseNeedReading reads a reading's name.
func ParseNeedReading(name string) (NeedReading, error) {
	switch name {
	case ReadingBest:
		return NeedBest, nil
	case ReadingWholeTrace:
		return NeedWholeTrace, nil
	case ReadingSequential:
		return NeedSequential, nil
	}
	return 0, fmt.Errorf("need reading %q: want %s, %s or %s", name, ReadingBest, ReadingWholeTrace, ReadingSequential)
}

// Reading is one reading of each minute's need.
type Reading struct {
	Name string
	Need []int
}

// Readings are each minute's needs (up to limit replicas) that the
// clairvoyant and reactive references may ask for, as s.Need reads them:
// one reading, or both.
func (s Setup) Readings(reqs []trace.Request, slo time.Duration, limit int) ([]Reading, error) {
	var out []Reading
	if s.Need != NeedSequential {
		need, err := offlinereplay.MinuteNeed(reqs, s.Profile, slo, limit)
		if err != nil {
			return nil, fmt.Errorf("whole-trace needs: %w", err)
		}
		out = append(out, Reading{Name: ReadingWholeTrace, Need: need})
	}
	if s.Need != NeedWholeTrace {
		need, err := offlinereplay.SequentialNeed(reqs, s.Profile, slo, limit)
		if err != nil {
			return nil, fmt.Errorf("sequential needs: %w", err)
		}
		out = append(out, Reading{Name: ReadingSequential, Need: need})
	}
	return out, nil
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
	// NeedReading names the needs a reference asked for
	// (ReadingWholeTrace or ReadingSequential); empty for a policy.
	NeedReading string
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
	var readings []Reading
	if slices.Contains(policies, offlinereplay.PolicyClairvoyant) || slices.Contains(policies, offlinereplay.PolicyReactive) {
		if readings, err = s.Readings(w.Requests, slo, static); err != nil {
			return Report{}, err
		}
	}
	one := workloadReplay{w: w, s: s, slo: slo, static: static, initial: initial}
	var staticSec, clairSec float64
	// Every fraction is of static's bill: static is replayed even when
	// not asked for, and then left out of the outcomes.
	replayed := policies
	askedStatic := slices.Contains(policies, autoscalebench.PolicyStatic)
	if !askedStatic {
		replayed = append([]string{autoscalebench.PolicyStatic}, policies...)
	}
	for _, name := range replayed {
		var o Outcome
		if name == offlinereplay.PolicyClairvoyant || name == offlinereplay.PolicyReactive {
			o, err = bestReading(readings, func(r Reading) (Outcome, error) {
				ropts := opts
				ropts.Need = r.Need
				return one.replay(name, ropts)
			})
		} else {
			o, err = one.replay(name, opts)
		}
		if err != nil {
			return Report{}, err
		}
		switch name {
		case autoscalebench.PolicyStatic:
			staticSec = o.ReplicaSeconds
			if !askedStatic {
				continue
			}
		case offlinereplay.PolicyClairvoyant:
			clairSec = o.ReplicaSeconds
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

// workloadReplay replays one workload under one policy at a time, at the
// workload's SLO, from its first minute's static size (static's own fleet
// for a policy that never scales).
type workloadReplay struct {
	w               Workload
	s               Setup
	slo             time.Duration
	static, initial int
}

func (r workloadReplay) replay(name string, opts offlinereplay.PolicyOptions) (Outcome, error) {
	p, b, err := offlinereplay.NewPolicy(name, opts)
	if err != nil {
		return Outcome{}, err
	}
	s := r.s
	cfg := offlinereplay.Config{Requests: r.w.Requests, Profile: s.Profile, SLO: r.slo, ModelLoad: s.ModelLoad,
		StartDelay: s.StartDelay, Grace: s.Grace, Initial: r.initial, Scrape: s.Scrape, Sync: s.Sync, SyncPhase: s.Phase,
		Behavior: b, Policy: p}
	if p == nil {
		cfg.Initial = r.static
	}
	res, err := offlinereplay.Run(cfg)
	if err != nil {
		return Outcome{}, fmt.Errorf("%s: %w", name, err)
	}
	o := Outcome{Policy: name, Result: res, GPUHours: res.ReplicaSeconds / 3600, ScaleEvents: res.Ups + res.Downs}
	for m := range res.P90 {
		if !math.IsNaN(res.P90[m]) {
			o.Minutes++
		}
	}
	return o, nil
}

// bestReading replays a reference on each reading and keeps the better
// run, more SLO minutes and then fewer GPU-hours, named by its reading.
func bestReading(readings []Reading, replay func(Reading) (Outcome, error)) (Outcome, error) {
	if len(readings) == 0 {
		return Outcome{}, errors.New("a reference with no needs to ask for")
	}
	var best Outcome
	for i, r := range readings {
		o, err := replay(r)
		if err != nil {
			return Outcome{}, fmt.Errorf("on %s needs: %w", r.Name, err)
		}
		o.NeedReading = r.Name
		if i == 0 || o.MinutesMet > best.MinutesMet || (o.MinutesMet == best.MinutesMet && o.ReplicaSeconds < best.ReplicaSeconds) {
			best = o
		}
	}
	return best, nil
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
