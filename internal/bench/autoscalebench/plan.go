package autoscalebench

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/internal/harness/devenv"
	"github.com/gpuscale/gpuscale/internal/harness/simworld"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
	"github.com/gpuscale/gpuscale/pkg/signal/recommend"
)

// Config is what a replay is asked to do. Durations are in trace time
// unless they say otherwise.
type Config struct {
	// TracePath names the trace file; Trace is its content.
	TracePath string
	Trace     *trace.Trace
	// Start and Duration pick the slice of the trace to replay.
	Start, Duration time.Duration
	// Speedup is how many times faster than real time the slice plays.
	Speedup float64
	// SLO is the TTFT p90 a trace minute must stay within.
	SLO time.Duration
	// ModelLoad is how long a new replica takes to become Ready.
	ModelLoad time.Duration
	// Profile names the replicas' inferencesim profile.
	Profile string
	// Policies to run, all at once, each on its own copy of the traffic.
	Policies []string
	Targets  Targets
	// MaxReplicas caps every HPA; 0 means the static policy's size, the
	// fleet the README advises as maxReplicas.
	MaxReplicas int
	// SampleEvery is how often each workload's replicas are recorded.
	SampleEvery time.Duration
	// Grace is how long the replay waits after the last arrival for
	// requests still in flight. A deleted replica drains as its pod
	// template says (Plan.Drain).
	Grace time.Duration
	// DrainMode is how a removed replica drains: DrainWait (the default,
	// when empty) or DrainSleep.
	DrainMode DrainMode
	Log       *slog.Logger
}

// DefaultConfig is the replay `make bench-autoscale` runs on a trace.
func DefaultConfig(path string, t *trace.Trace) Config {
	return Config{
		TracePath: path, Trace: t,
		Duration:    t.Duration() + time.Nanosecond,
		Speedup:     6,
		SLO:         time.Second,
		ModelLoad:   time.Minute,
		Profile:     "l4-llama-3.1-8b",
		Policies:    slices.Clone(Policies),
		Targets:     Targets{GPUUtilization: 70, QueueDepth: 1, RequestsRunning: 16, TTFT: time.Second},
		SampleEvery: 5 * time.Second,
		Grace:       30 * time.Second,
		DrainMode:   DrainWait,
	}
}

// Plan is a Config checked and sized: the requests to send, the static
// policy's size and every workload's starting size.
type Plan struct {
	Config
	Requests []trace.Request
	profile  inferencesim.Profile
	// Static is the static policy's replicas; StaticMet of Minutes trace
	// minutes meet the SLO with them (and no more with any number).
	Static, StaticMet, Minutes int
	// Initial is every workload's size when the replay starts: the
	// static need of the slice's first minute, as if the traffic before
	// the slice had been served well.
	Initial int
	// Drain is the drain of the replicas' pod template in DrainMode, from
	// the slice's stream lengths as `adapter recommend` derives them (see
	// AbortSuffix for runs without it).
	Drain recommend.Drain
}

// maxSizing bounds the offline search for the static size.
const maxSizing = 64

// NewPlan checks cfg and sizes the replay.
func NewPlan(cfg Config) (*Plan, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if cfg.Trace == nil {
		errs = append(errs, errors.New("no trace"))
	}
	if !(cfg.Speedup >= 1) || math.IsInf(cfg.Speedup, 0) {
		errs = append(errs, fmt.Errorf("speedup must be at least 1, got %v", cfg.Speedup))
	}
	if cfg.SLO <= 0 || cfg.Duration <= 0 || cfg.SampleEvery <= 0 || cfg.ModelLoad < 0 || cfg.Grace < 0 || cfg.Start < 0 {
		errs = append(errs, fmt.Errorf("SLO, duration and sample interval must be positive, model load, grace and start not negative"))
	}
	for _, p := range cfg.Policies {
		if base, _ := splitPolicy(p); !slices.Contains(Policies, base) {
			errs = append(errs, fmt.Errorf("unknown policy %q (known: %v, each optionally followed by %s)", p, Policies, AbortSuffix))
		}
	}
	if len(cfg.Policies) == 0 {
		errs = append(errs, errors.New("no policies"))
	}
	if cfg.DrainMode == "" {
		cfg.DrainMode = DrainWait
	}
	if !slices.Contains(DrainModes, cfg.DrainMode) {
		errs = append(errs, fmt.Errorf("unknown drain %q (known: %v)", cfg.DrainMode, DrainModes))
	}
	profile, err := inferencesim.ProfileByName(cfg.Profile)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("autoscalebench: %w", errors.Join(errs...))
	}
	// A slice past the trace's last request would bill minutes the trace
	// never had to every policy: static's full fleet and an autoscaler's
	// idle minimum, which the offline replay, ending with the trace, does
	// not; their shares of static's GPU-hours would then disagree.
	if end := cfg.Trace.Duration() - cfg.Start + time.Nanosecond; end > 0 && cfg.Duration > end {
		cfg.Duration = end
	}
	p := &Plan{Config: cfg, profile: profile, Requests: cfg.Trace.Slice(cfg.Start, cfg.Duration)}
	p.Targets.ModelLoad, p.Targets.Startup = cfg.ModelLoad, cfg.ModelLoad+Scheduling
	if len(p.Requests) == 0 {
		return nil, fmt.Errorf("autoscalebench: the trace has no requests in [%v, %v)", cfg.Start, cfg.Start+cfg.Duration)
	}
	if p.Static, p.StaticMet, p.Minutes, err = StaticNeed(p.Requests, profile, cfg.SLO, maxSizing); err != nil {
		return nil, err
	}
	first := cfg.Trace.Slice(cfg.Start, min(time.Minute, cfg.Duration))
	if len(first) == 0 {
		p.Initial = 1
	} else if p.Initial, _, _, err = StaticNeed(first, profile, cfg.SLO, maxSizing); err != nil {
		return nil, err
	}
	if p.Drain, err = streamDrain(p.Requests, profile, p.Static); err != nil {
		return nil, err
	}
	if p.MaxReplicas == 0 {
		p.MaxReplicas = p.Static
	}
	p.MaxReplicas = max(p.MaxReplicas, p.Initial)
	return p, nil
}

// wall converts trace time to wall time.
func (p *Plan) wall(d time.Duration) time.Duration {
	return time.Duration(float64(d) / p.Speedup)
}

// gpus is how many GPUs the cluster needs for every policy at its largest.
func (p *Plan) gpus() int {
	n := 0
	for _, policy := range p.Policies {
		if base, _ := splitPolicy(policy); base == PolicyStatic {
			n += p.Static
		} else {
			n += p.MaxReplicas
		}
	}
	return n
}

// Clock is the simulation's clock: it runs Speedup times faster than the
// wall clock from the moment it is made.
type Clock struct {
	origin  time.Time
	speedup float64
}

// NewClock starts a clock running speedup times faster than real time.
func NewClock(speedup float64) *Clock { return &Clock{origin: time.Now(), speedup: speedup} }

// Now is the simulated instant.
func (c *Clock) Now() time.Time {
	return c.origin.Add(time.Duration(c.speedup * float64(time.Since(c.origin))))
}

// EnvOptions are the options of the environment a plan runs in: enough
// GPU nodes for every policy at its maximum, and every controller timer of
// the real system divided by the speedup, so that the HPA syncs every 15 s
// and the adapter scrapes every 5 s and keeps a 60 s TTFT window, in trace
// time.
func (p *Plan) EnvOptions(dir string, clock *Clock, log *slog.Logger) devenv.Options {
	return envOptions(dir, clock, log, p.Speedup, p.SLO, p.gpus())
}

// envOptions are the options of an environment for gpus GPUs on a clock
// speedup times faster than real time, whose capacity signal holds slo,
// with extra adapter flags.
func envOptions(dir string, clock *Clock, log *slog.Logger, speedup float64, slo time.Duration, gpus int, extra ...string) devenv.Options {
	const gpusPerNode = 8
	wall := func(d time.Duration) time.Duration { return time.Duration(float64(d) / speedup) }
	scrape := wall(5 * time.Second)
	return devenv.Options{
		Dir:           dir,
		Nodes:         cmp.Or((gpus+gpusPerNode-1)/gpusPerNode, 1),
		GPUsPerNode:   gpusPerNode,
		HPASyncPeriod: wall(15 * time.Second),
		Logger:        log,
		AdapterArgs: append([]string{
			"--scrape-interval=" + scrape.String(), "--max-staleness=" + (3 * scrape).String(),
			"--ttft-window=" + wall(time.Minute).String(),
			// The simulated servers time prefills in trace time; the
			// adapter's window is wall time.
			"--capacity-time-scale=" + strconv.FormatFloat(speedup, 'g', -1, 64),
			// The capacity signal holds the SLO the run is judged on (in
			// the servers' trace time), as the offline replay's does: at
			// the adapter's default 1 s against a 2 s SLO, the prefill
			// term finds the objective out of reach and asks for nothing.
			"--capacity-ttft-objective=" + slo.String(),
			"--scale-down-controller", "--scale-down-resync=" + wall(10*time.Second).String(),
			"--scale-down-idle-time=" + wall(5*time.Minute).String(),
		}, extra...),
		ConfigureWorld: func(o *simworld.Options) {
			o.Now = clock.Now
			o.TimeScale = speedup
		},
	}
}

// LogDir is where the environment's component logs go under dir.
func LogDir(dir string) string { return filepath.Join(dir, "logs") }
