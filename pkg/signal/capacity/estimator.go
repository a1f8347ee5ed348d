package capacity

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

var (
	// ErrNoData is wrapped when no Ready replica has fresh values of
	// requests running, waiting and KV-cache use: no demand is known.
	ErrNoData = errors.New("no ready replica reports requests running, waiting and KV-cache use")
	// ErrNoCapacity is wrapped when there is demand but no request has
	// yet been seen running with KV-cache in use, so how many requests a
	// replica holds is unknown.
	ErrNoCapacity = errors.New("no replica's capacity measured yet")
)

// Pod is what the estimator needs of one pod of a workload.
type Pod struct {
	// Ready: the pod is Ready and not terminating. Loading: it is
	// neither Ready nor terminating, so it will serve once loaded.
	Ready, Loading bool
	// Startup is the pod's measured creation-to-Ready time, 0 when
	// unknown (recommend.StartupTime).
	Startup time.Duration
	// ReadyAt is when the pod turned Ready (its Ready condition's last
	// transition), zero when unknown: such a pod is taken as settled.
	ReadyAt time.Time
	// Data says the pod's newest values below are fresh; only Ready
	// pods have any.
	Data bool
	// Running and Waiting are the requests in the batch and in the
	// queue; KVPercent the KV cache in use, 0-100.
	Running, Waiting, KVPercent float64
	// UID identifies the pod across estimates, and Prefill is its newest
	// cumulative histogram of finished requests' prefill times
	// (seconds), nil when its server exports none: the estimator takes
	// each pod's increase from one estimate to the next.
	UID     string
	Prefill *histogram.Histogram
	// TTFT is its newest cumulative histogram of times to first token
	// (seconds), nil when its server exports none: what the closed loop
	// measures the objective's quantile on.
	TTFT *histogram.Histogram
	// ITL is its newest cumulative inter-token latency histogram
	// (seconds), nil when its server exports none; read only with an ITL
	// objective.
	ITL *histogram.Histogram
}

// Estimate is the signal and every part of it, so that each decision can
// be explained (the adapter exports them as its own metrics).
type Estimate struct {
	// Utilization is Forecast over what the replicas with data serve
	// within the objective: Forecast / (PerReplica x Replicas).
	Utilization float64
	// Demand is the requests in the Ready replicas now, running or
	// waiting: summed over those with fresh data, and for each Ready
	// replica without (a scrape missed or not yet taken) their mean, as
	// the Service spreads requests evenly over Ready replicas. Without
	// that, a replica that misses a scrape would take its requests out of
	// the total the forecast smooths, and the HPA, which multiplies the
	// ratio by every Ready replica, would read the lagging total over too
	// few replicas as overload.
	Demand float64
	// Forecast is the most requests expected at any time over the
	// horizon: the larger of Demand and Holt's damped forecast.
	Forecast float64
	// Level is Holt's level; Trend (requests per second) the part of its
	// trend that exceeds its noise (Holt.SignificantTrend), which the
	// forecast projects; TrendStdErr that noise.
	Level, Trend, TrendStdErr float64
	// Slots is how many requests of the current mix one replica's KV
	// cache holds (1 over the share a running request fills);
	// PerReplica how many of them it carries with at most the late
	// budget's share finding too little KV free (MaxKVLoad).
	Slots, PerReplica float64
	// Dispersion and KVDispersion are the measured indices of dispersion
	// (variance over mean, across the Ready replicas, smoothed over the
	// window) of the requests each replica took between estimates (its
	// prefill histogram's count) and of its KV share in use; the
	// defaults of a random router (1, and 1/Slots: equal requests) until
	// two replicas have reported a load.
	Dispersion, KVDispersion float64
	// Residence is how long a request stays in a replica's batch, on the
	// servers' clock (Little's law: requests running over the rate of
	// first tokens in the window; 0 unmeasured), and Slack the time a
	// request of the window's mean prefill may wait within the
	// objective; LateBudget the share of requests the KV term lets find
	// too little KV free (LateBudget).
	Residence, Slack, LateBudget float64
	// Horizon is the median measured start-up time of the workload's
	// pods: how far ahead a scale-up decided now takes effect.
	Horizon time.Duration
	// Replicas are the Ready replicas and Reporting those of them with
	// fresh data; Loading the pods still loading, and LoadingCredit the
	// requests they will serve once Ready.
	Replicas, Reporting, Loading int
	LoadingCredit                float64
	// KVNeeded is Forecast / PerReplica: the replicas the KV caches
	// need.
	KVNeeded float64
	// Prefill is what the prefill times of the window's finished
	// requests say one replica's prefill carries; PrefillBusy the
	// replicas' worth of prefill work per second over the window (the
	// sum of the busy fractions), and PrefillNeeded that work, grown as
	// the demand is forecast to grow, with PrefillBacklog, over
	// Prefill.MaxBusy: the replicas prefill needs (0 without a limit).
	Prefill       PrefillLimit
	PrefillBusy   float64
	PrefillNeeded float64
	// PrefillBacklog is the prefill work of the requests waiting now,
	// spread over the horizon, in replicas' worth (prefillBacklog); it
	// is added to PrefillBusy grown by the forecast.
	PrefillBacklog float64
	// ITL is what the window's inter-token latencies say one replica
	// decodes within the ITL objective, and ITLNeeded the replicas'
	// decoding, grown as the demand is forecast to grow, over its Slots
	// (0 without an ITL objective or enough tokens).
	ITL       ITLLimit
	ITLNeeded float64
	// MeasuredTTFT is the objective's quantile of the times to first
	// token the servers measured over the window (seconds; 0 with too
	// few to tell), and Correction the closed loop's factor on the
	// model's replicas (1: none; within [1/MaxCorrection,
	// MaxCorrection]).
	MeasuredTTFT, Correction float64
	// Needed is Correction times the largest of KVNeeded, PrefillNeeded
	// and ITLNeeded: the replicas the HPA asks for.
	Needed float64
	// PrefillObjective is the time to first token the prefill term was
	// held to (seconds): the objective, or a disaggregated model's
	// prefill pool's share of it (EstimatePrefillPool).
	PrefillObjective float64
}

// Config sets the estimator's one policy choice.
type Config struct {
	// Quantile is the TTFT quantile the objective is stated on (0.9 for
	// a p90 SLO): a replica is full when more than 1-Quantile of
	// arriving requests would queue.
	Quantile float64
	// Objective is the TTFT the quantile must stay within; the prefill
	// term works out how busy a replica's prefill may run from it.
	Objective time.Duration
	// Window is how far back the prefill times of finished requests are
	// taken from.
	Window time.Duration
	// TimeScale is how many seconds pass on the servers' clocks, which
	// time the prefills, per second of the estimator's, which times the
	// window: 1 on a cluster, the speedup in a replay that runs simulated
	// servers faster than real time. 0 means 1.
	TimeScale float64
	// Forget drops a workload's state after it was not asked about for
	// this long.
	Forget time.Duration
	// MinCorrection and MaxCorrection bound the closed loop's factor on
	// the model's replicas, within [1/2, 2] (0: those); 1 and 1 hold the
	// loop open (it measures and exports, and corrects nothing). The
	// default is the widest, [1/2, 2]: with maxReplicas at the static
	// fleet (the README's HPA), on the workload family it turns 6 of 17
	// workloads under 90% of static's SLO minutes into 5 and cuts scale
	// events by a sixth, for a few points of GPU-hours on bursty shapes
	// (docs/autoscaling.md, "Robustness"). Open, it had been the default
	// while maxReplicas allowed twice static's fleet, where a loop that
	// climbs on chance misses ratcheted the bill up.
	MinCorrection, MaxCorrection float64
	// SpreadKV sizes the KV term by MaxKVLoad on the measured spread of
	// the KV in use, with the objective's slack, instead of Erlang C on
	// equal slots; MeasuredArrivals has the prefill term take the
	// arrivals' measured dispersion (below 1 for a router more even than
	// random, above for a burstier one) instead of Poisson arrivals
	// (M/G/1). Both are off by default: on the
	// workload family they moved cost from some workloads to others and
	// lost minutes on ramps (docs/autoscaling.md, "Robustness").
	SpreadKV, MeasuredArrivals bool
	// SettledSpread leaves out of the measured spread of KV in use the
	// replicas that turned Ready within the last Window: a replica just
	// Ready holds nothing yet, and beside full ones it reads as a spread
	// the router does not make (it fills within a window of arrivals).
	SettledSpread bool
	// MaxTargetsPerNamespace and MaxTargets bound the workloads and
	// models whose state is kept, per namespace and in all; 0 means
	// DefaultMaxTargetsPerNamespace and DefaultMaxTargets.
	MaxTargetsPerNamespace, MaxTargets int
	// PrefillPool says the pool does nothing but prefill (the prefill
	// pool of a disaggregated model): its prefill term never gives up,
	// since no other term carries its work. Where the objective is out
	// of reach for the quantile (prefillPoolLimit), the pool is held to
	// what its longest prompts' own prefill allows instead. It has no
	// KV term: a prefill replica holds a request's cache for its prefill
	// and transfer, a second or two, so KV room bounds its throughput,
	// which the prefill term measures as busy time, and never a slot
	// held for a stream. Read as slots, one long prompt caught at a
	// scrape made a replica's cache "hold" half a request, and three
	// requests in flight asked for six replicas.
	PrefillPool bool
	// ITLObjective, when positive, is the inter-token latency the
	// Quantile must stay within: the ITL term, for decode-bound models,
	// works out from it how many sequences a replica decodes. 0: no ITL
	// term.
	ITLObjective time.Duration
}

// observeGap is the least time between two of the forecast's observations:
// half the level's time constant, an eighth of the horizon (7.5 s of a
// one-minute start-up, below the HPA controller's 15 s sync period, so each
// of its syncs is observed). Every read of the signal is an estimate, and
// anyone allowed to read it sets how often they come; Holt's trend test
// counts observations, so without a floor, readers beyond the HPA would
// make noise look like a trend. Closer observations than this tell the
// level nothing new about the horizon it must look across.
func observeGap(horizon time.Duration) time.Duration {
	return ForecastSmoothing(horizon).Level / 2
}

// DefaultConfig protects a p90 objective of one second, with prefill
// times over the last minute.
func DefaultConfig() Config {
	return Config{Quantile: 0.9, Objective: time.Second, Window: time.Minute, Forget: 10 * time.Minute, MinCorrection: 1 / MaxCorrection, MaxCorrection: MaxCorrection}
}

// Estimator keeps, per workload or model, the forecast's state and the
// last measured capacity. It is safe for concurrent use.
//
// Its lock guards only which states exist: each estimate runs under its own
// target's lock, so a slow estimate of one target (thousands of pods, say)
// never holds up another's, and never another namespace's. Which states
// exist is bounded too: a target gets one only once its pods have data,
// each namespace holds at most Config.MaxTargetsPerNamespace of them and
// all namespaces MaxTargets, and forgotten ones are swept at most once per
// sweepEvery rather than on every read.
type Estimator struct {
	cfg     Config
	metrics *Metrics
	mu      sync.Mutex
	state   map[Key]*workloadState
	// perNamespace counts each namespace's states.
	perNamespace map[string]int
	// swept is when forgotten states were last looked for.
	swept time.Time
}

// Key names what is estimated: a workload ("deployment/llm") or a model
// ("model/llama") in a namespace.
type Key struct{ Namespace, Target string }

type workloadState struct {
	// lastUsed is when the target was last asked about, in Unix
	// nanoseconds: set under the Estimator's lock, read by its sweep.
	lastUsed atomic.Int64
	// mu is held across one estimate of the target.
	mu       sync.Mutex
	holt     Holt
	observed time.Time // the forecast's last observation
	slots    float64   // last measured, 0: never
	prefill  prefillWindow
	spread   spread
	ttft     prefillWindow
	loop     loop
	// decodeTTFT is a prefill pool's decode pool's TTFT histograms'
	// increases (EstimatePrefillPool).
	decodeTTFT prefillWindow
	itl        prefillWindow // the ITL histograms' increases
	itlFit     itlFit
}

// Bounds on the states kept, the defaults of Config.MaxTargetsPerNamespace
// and Config.MaxTargets. A state is a few KiB (the forecast, and a window
// of up to 13 merged prefill histograms); a namespace rarely has more than
// a few dozen workloads and models with a capacity HPA.
const (
	DefaultMaxTargetsPerNamespace = 256
	DefaultMaxTargets             = 4096
)

// ErrTooManyTargets is wrapped when a target would need a state past
// MaxTargetsPerNamespace or MaxTargets: it gets no value until states are
// forgotten.
var ErrTooManyTargets = errors.New("too many workloads and models estimated")

// New returns an estimator; m may be nil.
func New(cfg Config, m *Metrics) *Estimator {
	if cfg.MaxTargetsPerNamespace <= 0 {
		cfg.MaxTargetsPerNamespace = DefaultMaxTargetsPerNamespace
	}
	if cfg.MaxTargets <= 0 {
		cfg.MaxTargets = DefaultMaxTargets
	}
	return &Estimator{cfg: cfg, metrics: m, state: map[Key]*workloadState{}, perNamespace: map[string]int{}}
}

// Estimate updates k's forecast with pods at now and returns the signal.
// Errors wrap ErrNoData, ErrNoCapacity or ErrTooManyTargets: no value is
// made up.
func (e *Estimator) Estimate(k Key, now time.Time, pods []Pod) (Estimate, error) {
	return e.EstimateWithin(k, now, pods, e.cfg.Objective)
}

// EstimateWithin is Estimate with the prefill term held to objective in
// place of the configured TTFT objective: the share of a time to first
// token a prefill pool has, what the decode pool after it leaves
// (provider, roles).
func (e *Estimator) EstimateWithin(k Key, now time.Time, pods []Pod, objective time.Duration) (Estimate, error) {
	st, err := e.stateFor(k, now, hasData(pods))
	if err != nil {
		e.metrics.failed(err)
		return Estimate{}, fmt.Errorf("%s/%s: %w", k.Namespace, k.Target, err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	est, err := e.estimate(st, now, pods, objective)
	if err != nil {
		e.metrics.failed(err)
		return Estimate{}, fmt.Errorf("%s/%s: %w", k.Namespace, k.Target, err)
	}
	e.metrics.set(k, est)
	return est, nil
}

// stateFor returns k's state, marked used at now. A target without one
// gets one only when its pods have data (otherwise ErrNoData: asking about
// names no pod serves costs nothing kept) and the bounds leave room.
func (e *Estimator) stateFor(k Key, now time.Time, data bool) (*workloadState, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sweepLocked(now)
	st := e.state[k]
	if st == nil {
		switch {
		case !data:
			return nil, ErrNoData
		case e.perNamespace[k.Namespace] >= e.cfg.MaxTargetsPerNamespace:
			return nil, fmt.Errorf("%w: namespace %s has %d, the most kept per namespace", ErrTooManyTargets, k.Namespace, e.cfg.MaxTargetsPerNamespace)
		case len(e.state) >= e.cfg.MaxTargets:
			return nil, fmt.Errorf("%w: %d, the most kept", ErrTooManyTargets, e.cfg.MaxTargets)
		}
		st = &workloadState{}
		e.state[k] = st
		e.perNamespace[k.Namespace]++
	}
	st.lastUsed.Store(now.UnixNano())
	return st, nil
}

// hasData reports whether a Ready pod has fresh values: what an estimate
// needs before anything about its target is worth keeping.
func hasData(pods []Pod) bool {
	for _, p := range pods {
		if p.Ready && p.Data {
			return true
		}
	}
	return false
}

// maxSlots bounds the requests one replica's KV cache is taken to hold:
// the most requests one server holds (signal.MaxRequests). Slots are running
// requests over KV cache in use, both the pod's to report, and a tiny KV
// use makes them any number.
const maxSlots = 1 << 30

func (e *Estimator) estimate(st *workloadState, now time.Time, pods []Pod, objective time.Duration) (Estimate, error) {
	c := e.census(now, pods)
	if c.reporting == 0 {
		return Estimate{}, ErrNoData
	}
	est := Estimate{Replicas: c.ready, Reporting: c.reporting, Loading: c.loading, Demand: c.demand,
		PrefillObjective: objective.Seconds()}
	est.Demand *= float64(est.Replicas) / float64(est.Reporting)
	est.Horizon = median(c.startups)
	// A replica's KV cache holds 1/(KV used per running request)
	// requests of the current mix. Measured when at least one request
	// runs; otherwise the last measurement stands.
	if c.running >= 1 && c.kv > 0 {
		st.slots = min(c.running/c.kv, maxSlots)
	}
	est.Slots = st.slots
	st.spread.observe(now, c.perKV, e.cfg.Window)

	if st.holt.Len() == 0 || now.Sub(st.observed) >= observeGap(est.Horizon) {
		st.holt.Observe(now, est.Demand, ForecastSmoothing(est.Horizon))
		st.observed = now
	}
	est.Level, est.Trend, est.TrendStdErr = st.holt.Level(), st.holt.SignificantTrend(), st.holt.TrendStdErr()
	// Capacity added now serves from a horizon away; removing it acts at
	// once. So the replicas must carry the peak expected until then:
	// for a damped trend, its end or now.
	est.Forecast = max(est.Demand, st.forecast(now, est.Horizon), 0)
	e.prefillTerm(st, now, pods, c.running*float64(est.Replicas)/float64(est.Reporting), &est, objective)
	e.itlTerm(st, now, pods, &est)
	if est.Slots > 0 {
		e.kvPerReplica(st, &est)
	}

	if est.Forecast == 0 && est.PrefillNeeded == 0 {
		// Nothing runs or waits and nothing is expected: no capacity
		// is used, whatever a replica holds.
		e.closeLoop(st, now, pods, 0, objective, &est)
		est.LoadingCredit = float64(est.Loading) * est.PerReplica
		return est, nil
	}
	if est.Forecast > 0 && !e.cfg.PrefillPool {
		if est.Slots <= 0 {
			return Estimate{}, ErrNoCapacity
		}
		if est.PerReplica <= 0 {
			return Estimate{}, fmt.Errorf("%w: %.3g requests fit a replica's KV cache", ErrNoCapacity, est.Slots)
		}
		est.KVNeeded = est.Forecast / est.PerReplica
	}
	// A prefill pool found empty between its requests (prefillTerm)
	// needs no KV room now, and its prefill work still counts.
	est.LoadingCredit = float64(est.Loading) * est.PerReplica
	model := max(est.KVNeeded, est.PrefillNeeded, est.ITLNeeded)
	e.closeLoop(st, now, pods, model, objective, &est)
	est.Needed = est.Correction * model
	est.Utilization = est.Needed / float64(est.Replicas)
	return est, nil
}

// podCensus is what a workload's pods report at one estimate: the
// replicas Ready, those reporting data among them and those loading, and
// the reporting ones' requests and KV cache in use.
type podCensus struct {
	ready, reporting, loading int
	// demand is the requests running and waiting; running those running.
	demand, running float64
	// kv is the KV cache in use, in caches' worth; perKV each replica's
	// share, for the spread (without replicas Ready for less than a
	// window with SettledSpread).
	kv       float64
	perKV    []float64
	startups []time.Duration
}

func (e *Estimator) census(now time.Time, pods []Pod) podCensus {
	var c podCensus
	for _, p := range pods {
		if p.Startup > 0 {
			c.startups = append(c.startups, p.Startup)
		}
		if p.Loading {
			c.loading++
		}
		if p.Ready {
			c.ready++
		}
		if !p.Ready || !p.Data {
			continue
		}
		c.reporting++
		c.demand += p.Running + p.Waiting
		c.running += p.Running
		c.kv += p.KVPercent / 100
		if !e.cfg.SettledSpread || p.ReadyAt.IsZero() || now.Sub(p.ReadyAt) >= e.cfg.Window {
			c.perKV = append(c.perKV, p.KVPercent/100)
		}
	}
	return c
}

// kvPerReplica fills the KV term's capacity: the requests of the current
// mix one replica carries (MaxKVLoad over the mean request's share), with
// the KV in use as spread as it was measured across the replicas and the
// late budget the objective's slack allows.
func (e *Estimator) kvPerReplica(st *workloadState, est *Estimate) {
	kbar := 1 / est.Slots
	est.KVDispersion = kbar // equal requests, routed at random
	if d, ok := st.spread.kv(); ok {
		est.KVDispersion = d
	}
	est.LateBudget = LateBudget(e.cfg.Quantile, est.Slack, est.Residence)
	if !e.cfg.SpreadKV {
		est.PerReplica = MaxLoad(int(est.Slots), 1-e.cfg.Quantile)
		return
	}
	est.PerReplica = MaxKVLoad(kbar, est.KVDispersion, est.LateBudget) / kbar
}

// ForecastSmoothing is the forecast's smoothing for a start-up horizon:
// the level settles within a quarter of it and the trend within half, so
// that after a change the forecast has caught up within one horizon; the
// trend, which the horizon multiplies, is the smoother of the two. The
// trend fades with a time constant of one horizon: a trend is assumed to
// last about as long as the start-up it must anticipate, no longer, so a
// forecast one horizon ahead adds trend x 0.63 horizon, and no forecast
// adds more than trend x horizon. On a steady ramp the damped trend
// settles at 2/3 of the slope (damped trends understate a trend that
// persists; that is their price for not overshooting one that stops), so
// the forecast leads a ramp by about 0.42 horizon of its slope. Every
// constant is a share of the measured horizon; none is fitted to a trace.
func ForecastSmoothing(horizon time.Duration) Smoothing {
	return Smoothing{Level: horizon / 4, Trend: horizon / 2, Damping: horizon}
}

// forecast is Holt's forecast for horizon after now; its last observation
// may be up to observeGap before now.
func (st *workloadState) forecast(now time.Time, horizon time.Duration) float64 {
	return st.holt.Forecast(horizon + now.Sub(st.observed))
}

// sweepLocked drops the states not asked about for Config.Forget, at most
// once per sweepEvery: a pass over every state on every read would make a
// read cost as much as all the states kept.
func (e *Estimator) sweepLocked(now time.Time) {
	if now.Sub(e.swept) < sweepEvery(e.cfg.Forget) {
		return
	}
	e.swept = now
	for k, st := range e.state {
		if now.Sub(time.Unix(0, st.lastUsed.Load())) > e.cfg.Forget {
			delete(e.state, k)
			if e.perNamespace[k.Namespace]--; e.perNamespace[k.Namespace] <= 0 {
				delete(e.perNamespace, k.Namespace)
			}
			e.metrics.forget(k)
		}
	}
}

// sweepEvery is a tenth of the forget delay: a state outlives it by at most
// that much.
func sweepEvery(forget time.Duration) time.Duration { return forget / 10 }

// median is the lower median of ds, 0 when empty.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[(len(ds)-1)/2]
}
