package offlinereplay

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/autoscalebench"
	"github.com/gpuscale/gpuscale/pkg/signal/capacity"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
	"github.com/gpuscale/gpuscale/pkg/signal/recommend"
)

// Policies the replay has beyond the bench's (autoscalebench.Policies).
const (
	// PolicyRecommended is the README's first example HPA: what a user
	// who follows it runs (autoscalebench.Recommended).
	PolicyRecommended = autoscalebench.PolicyRecommended
	// PolicyClairvoyant knows each minute's need in advance and asks for
	// it one start-up ahead: the bound no causal policy can beat.
	PolicyClairvoyant = "clairvoyant"
	// PolicyReactive knows each minute's need as the minute starts and
	// asks for it (and PolicyOptions.ReactiveMargin above it) at once,
	// with no start-up's lead, then holds it for
	// PolicyOptions.ReactiveHold: a perfect model of the load with at
	// least the foresight any causal policy has, so the minutes it misses
	// are owed to the start-up, not to a model.
	PolicyReactive = "reactive"
	// PolicySchedule asks for a fixed count from a fixed time.
	PolicySchedule = "schedule"
)

// AllPolicies are every policy the replay emulates, in report order: the
// bench's, then the recommended one and the clairvoyant and reactive
// references.
func AllPolicies() []string {
	return append(append([]string(nil), autoscalebench.Policies...), PolicyRecommended, PolicyClairvoyant, PolicyReactive)
}

// hpaTolerance is the HPA controller's default tolerance.
const hpaTolerance = 0.1

// PolicyOptions are what a policy is configured from; the zero values,
// except where said, are the bench's.
type PolicyOptions struct {
	// Targets are the bench's HPA targets; Targets.TTFT is the SLO and
	// Targets.RecommendStartup the start-up time `adapter recommend`
	// measures.
	Targets autoscalebench.Targets
	// Objective and Window are the capacity signal's TTFT objective (0:
	// the SLO) and prefill-time window (0: a minute); DownWindow, when not
	// 0, replaces the scale-down window `adapter recommend` gives it.
	Objective, Window, DownWindow time.Duration
	// DownPeriod, when not 0, replaces the period of every scale-down
	// policy `adapter recommend` gives the capacity policy; DownPercent,
	// when not 0, adds a policy of that percent per the same period;
	// DownPods, when not 0, replaces the replicas of every Pods policy.
	DownPercent, DownPods int
	DownPeriod            time.Duration
	// TTFTWindow is the adapter's --ttft-window (0: a minute).
	TTFTWindow time.Duration
	// MaxReplicas bounds every autoscaled policy.
	MaxReplicas int
	// Schedule is the schedule policy's DURATION:N.
	Schedule string
	// Need is, for the clairvoyant reference, each trace minute's need
	// (MinuteNeed).
	Need []int
	// ReactiveHold is how long the reactive reference keeps replicas
	// after the need falls (its HPA's scale-down window; 0: one start-up,
	// as `adapter recommend` gives).
	ReactiveHold time.Duration
	// ReactiveMargin is the share the reactive reference asks for above
	// each minute's need (0.25: a quarter more replicas, rounded up).
	ReactiveMargin float64
	// ReactiveLookback, when above 0, makes the reactive reference ask
	// for ReactiveQuantile of the needs of the current minute and the
	// ReactiveLookback minutes before it, instead of the current
	// minute's: a causal policy with a perfect model of every minute it
	// has seen, that may learn how the load varies but not when it will.
	ReactiveLookback int
	// ReactiveQuantile is that quantile, in (0, 1] (nearest rank).
	ReactiveQuantile float64
	// ReactivePeriodic makes the reactive reference also ask, a start-up
	// ahead, for the needs one period before the minutes coming, once the
	// needs it has seen repeat with a period (seasonalPeriod): what a
	// policy that learns a period gets, with the reactive reference's
	// knowledge (every need up to the current minute's, as it starts).
	ReactivePeriodic bool
	// CapacityTarget is the capacity policy's HPA target value (0:
	// recommend.CapacityTarget, the README's).
	CapacityTarget float64
	// Parts, when set, is called with every capacity estimate.
	Parts func(time.Time, capacity.Estimate)
	// Capacity, when set, changes the capacity policy's estimator
	// configuration after the defaults, the objective and the window
	// (sweeps of its options).
	Capacity func(*capacity.Config)
}

func (o PolicyOptions) ttftWindow() time.Duration {
	if o.TTFTWindow > 0 {
		return o.TTFTWindow
	}
	return time.Minute
}

// NewPolicy returns the named policy and the HPA behavior it runs with, as
// the bench configures it.
func NewPolicy(name string, o PolicyOptions) (Policy, Behavior, error) {
	maxR, t := o.MaxReplicas, o.Targets
	switch name {
	case autoscalebench.PolicyStatic:
		return nil, Behavior{}, nil
	case autoscalebench.PolicyGPUUtilization:
		return podsAverage{target: t.GPUUtilization, value: func(p PodView) float64 { return p.GPUUtilization }}, DefaultBehavior(1, maxR), nil
	case autoscalebench.PolicyQueueDepth:
		return podsAverage{target: t.QueueDepth, value: waiting}, DefaultBehavior(1, maxR), nil
	case autoscalebench.PolicyQueueDepthRecommended:
		return podsAverage{target: t.QueueDepth, value: waiting}, Recommended(t.RecommendStartup(), 0, false, 1, maxR), nil
	case autoscalebench.PolicyRunningRequests:
		return podsAverage{target: t.RequestsRunning, value: running}, DefaultBehavior(1, maxR), nil
	case autoscalebench.PolicyTTFT:
		return &ttftP90{target: t.TTFT.Seconds(), window: o.ttftWindow()}, DefaultBehavior(1, maxR), nil
	case autoscalebench.PolicyLLMD:
		// The law sets the Deployment's scale itself, its own scale-down
		// window included: no HPA between.
		return &llmd{slo: t.TTFT.Seconds(), window: o.ttftWindow(), maxR: maxR}, Unlimited(1, maxR), nil
	case autoscalebench.Recommended, PolicyRecommended:
		cfg := capacity.DefaultConfig()
		cfg.Objective, cfg.Window = t.TTFT, time.Minute
		if o.Objective > 0 {
			cfg.Objective = o.Objective
		}
		if o.Window > 0 {
			cfg.Window = o.Window
		}
		if o.Capacity != nil {
			o.Capacity(&cfg)
		}
		b := Recommended(t.RecommendStartup(), cfg.Window, cfg.ClosedLoop(), 1, maxR)
		if o.DownWindow > 0 {
			b.DownWindow = o.DownWindow
		}
		b.Down = o.downRates(b.Down)
		target := o.CapacityTarget
		if !(target > 0) {
			target = recommend.CapacityTarget
		}
		return &capacityPolicy{est: capacity.New(cfg, nil), parts: o.Parts, target: target}, b, nil
	case PolicyClairvoyant:
		if len(o.Need) == 0 {
			return nil, Behavior{}, fmt.Errorf("%s needs each minute's need", name)
		}
		return needOracle{need: o.Need, ahead: t.ModelLoad + clairvoyantReach}, Unlimited(1, maxR), nil
	case PolicyReactive:
		if len(o.Need) == 0 {
			return nil, Behavior{}, fmt.Errorf("%s needs each minute's need", name)
		}
		b := Unlimited(1, maxR)
		b.DownWindow = o.ReactiveHold
		if b.DownWindow <= 0 {
			b.DownWindow = t.ModelLoad
		}
		c := needOracle{need: o.Need, margin: o.ReactiveMargin, lookback: o.ReactiveLookback, quantile: o.ReactiveQuantile}
		if o.ReactivePeriodic {
			c.seasonalAhead = t.ModelLoad + clairvoyantReach
		}
		return c, b, nil
	case PolicySchedule:
		steps, err := parseSchedule(o.Schedule)
		if err != nil {
			return nil, Behavior{}, err
		}
		top := 0
		for _, st := range steps {
			top = max(top, st.n)
		}
		b := DefaultBehavior(1, max(top, maxR))
		b.Up = append(b.Up, Pods(top, 15*time.Second))
		b.DownWindow = time.Hour
		return steps, b, nil
	}
	return nil, Behavior{}, fmt.Errorf("unknown policy %q (known: %s, %s)", name, strings.Join(AllPolicies(), ", "), PolicySchedule)
}

// Unlimited is a behavior with no stabilization and no rate limits: a
// controller that sets the Deployment's scale itself.
func Unlimited(minR, maxR int) Behavior {
	return Behavior{Up: []Rate{Pods(1<<20, time.Second)}, Down: []Rate{Percent(100, time.Second)}, MinReplicas: minR, MaxReplicas: maxR}
}

// Recommended is the behavior `adapter recommend` gives for a start-up
// time, the signal's window (0: the adapter's default) and an HPA on the
// capacity signal with its loop closed or not (recommend.Workload's
// ClosedLoop), as the bench's recommended policies use it.
func Recommended(startup, window time.Duration, closedLoop bool, minR, maxR int) Behavior {
	rec := recommend.Recommend(recommend.Workload{Startup: []time.Duration{startup}, SignalWindow: window, ClosedLoop: closedLoop,
		GPUsPerPod: 1, GPUsPerNode: 8}, recommend.DefaultAutoscaler())
	b := Behavior{MinReplicas: minR, MaxReplicas: maxR}
	up, down := rec.Behavior.ScaleUp, rec.Behavior.ScaleDown
	b.UpWindow = time.Duration(*up.StabilizationWindowSeconds) * time.Second
	b.DownWindow = time.Duration(*down.StabilizationWindowSeconds) * time.Second
	b.Up, b.Down = RatesOf(up.Policies), RatesOf(down.Policies)
	return b
}

// downRates is the recommended policy's scale-down rates with the
// options' period and percent.
func (o PolicyOptions) downRates(rates []Rate) []Rate {
	out := slices.Clone(rates)
	if o.DownPeriod > 0 {
		for i := range out {
			out[i].Period = o.DownPeriod
		}
	}
	if o.DownPods > 0 {
		for i := range out {
			if !out[i].Percent {
				out[i].Value = o.DownPods
			}
		}
	}
	if o.DownPercent > 0 {
		period := o.DownPeriod
		if period <= 0 {
			period = out[0].Period
		}
		out = append(out, Percent(o.DownPercent, period))
	}
	return out
}

func waiting(p PodView) float64 { return float64(p.Waiting) }
func running(p PodView) float64 { return float64(p.Running) }

// podsAverage is a Pods metric at an averageValue, with the controller's
// handling of pods without a value: when scaling up they count as 0, so
// the ratio is taken over them too.
type podsAverage struct {
	target float64
	value  func(PodView) float64
}

func (p podsAverage) Recommend(v View) (int, bool) {
	sum, n, missing := 0.0, 0, 0
	for _, pod := range v.Pods {
		if pod.Ready && pod.Data {
			sum += p.value(pod)
			n++
		} else {
			missing++
		}
	}
	if n == 0 {
		return 0, false
	}
	ratio := sum / float64(n) / p.target
	if ratio > 1 && missing > 0 {
		if ratio = sum / float64(n+missing) / p.target; ratio <= 1+hpaTolerance {
			return v.Spec, true
		}
		return int(math.Ceil(ratio * float64(n+missing))), true
	}
	if math.Abs(ratio-1) <= hpaTolerance {
		return v.Spec, true
	}
	return int(math.Ceil(ratio * float64(n))), true
}

// objectValue is an Object metric at a value: the ratio of the value to
// the target times the Ready pods, within the controller's tolerance.
func objectValue(v View, value, target float64) int {
	ratio := value / target
	if math.Abs(ratio-1) <= hpaTolerance {
		return v.Spec
	}
	return int(math.Ceil(ratio * float64(v.Ready())))
}

// ttftWindow keeps each pod's TTFT histograms over the adapter's window and
// gives the Deployment's TTFT p90 over it, as the adapter computes it: the
// increase of each pod's histogram over the window, merged, and the
// quantile histogram_quantile would give.
type ttftWindow struct {
	window time.Duration
	seen   map[string][]timedHist
}

type timedHist struct {
	at time.Time
	h  *histogram.Histogram
}

// p90 records v's histograms and returns the p90 over the window, ok false
// when no request got its first token in it.
func (w *ttftWindow) p90(v View) (float64, bool) { return w.quantile(v, 0.9) }

// quantile is p90 at the quantile q.
func (w *ttftWindow) quantile(v View, q float64) (float64, bool) {
	if w.seen == nil {
		w.seen = map[string][]timedHist{}
	}
	var parts []*histogram.Histogram
	live := map[string]bool{}
	for _, p := range v.Pods {
		if !p.Ready || !p.Data || p.TTFT == nil {
			continue
		}
		live[p.Name] = true
		hs := append(w.seen[p.Name], timedHist{v.Now, p.TTFT})
		for len(hs) > 1 && v.Now.Sub(hs[1].at) >= w.window {
			hs = hs[1:]
		}
		w.seen[p.Name] = hs
		if inc, err := histogram.Increase(hs[0].h, p.TTFT); err == nil && len(hs) > 1 {
			parts = append(parts, inc)
		} else if len(hs) == 1 {
			parts = append(parts, p.TTFT) // a new pod: everything it served is within the window
		}
	}
	for name := range w.seen {
		if !live[name] {
			delete(w.seen, name)
		}
	}
	if len(parts) == 0 {
		return 0, false
	}
	m, err := histogram.Merge(parts...)
	if err != nil || m.Count <= 0 {
		return 0, false
	}
	x := histogram.Quantile(q, m)
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, false
	}
	return x, true
}

// ttftP90 is an Object metric: the Deployment's TTFT p90 at the SLO as
// its value.
type ttftP90 struct {
	target float64
	window time.Duration
	w      ttftWindow
}

func (p *ttftP90) Recommend(v View) (int, bool) {
	p.w.window = p.window
	q, ok := p.w.p90(v)
	if !ok {
		return 0, false
	}
	return objectValue(v, q, p.target), true
}

// llmd is the bench's reference, llm-d's SLO-aware control law
// (autoscalebench.LLMDLaw) on the Deployment's TTFT p90 over the SLO,
// reading 0 with no traffic.
type llmd struct {
	slo    float64
	window time.Duration
	maxR   int
	w      ttftWindow
	law    autoscalebench.LLMDLaw
}

func (p *llmd) Recommend(v View) (int, bool) {
	p.w.window = p.window
	q, _ := p.w.p90(v)
	at := v.Now.Sub(origin)
	return p.law.Step(at, q/p.slo, v.Spec, v.Ready(), 1, p.maxR), true
}

// capacityPolicy is an Object metric at its target value (the README's,
// recommend.CapacityTarget, unless PolicyOptions.CapacityTarget says
// otherwise) on the adapter's capacity estimator, fed what the adapter
// reads of each pod.
type capacityPolicy struct {
	est *capacity.Estimator
	// parts, when set, is called with every estimate.
	parts func(now time.Time, e capacity.Estimate)
	// target is the HPA's target value of the signal.
	target float64
}

func (c *capacityPolicy) Recommend(v View) (int, bool) {
	pods := make([]capacity.Pod, 0, len(v.Pods))
	for _, p := range v.Pods {
		cp := capacity.Pod{Ready: p.Ready, Loading: p.Loading}
		if p.Ready {
			cp.Startup, cp.ReadyAt = p.ReadyAt.Sub(p.Created), p.ReadyAt
			if p.Data {
				cp.Data, cp.Running, cp.Waiting, cp.KVPercent = true, float64(p.Running), float64(p.Waiting), 100*p.KVUsage
				cp.UID, cp.Prefill, cp.TTFT = p.Name, p.Prefill, p.TTFT
			}
		}
		pods = append(pods, cp)
	}
	est, err := c.est.Estimate(capacity.Key{Namespace: "replay", Target: "deployment/llm"}, v.Now, pods)
	if err != nil {
		return 0, false
	}
	if c.parts != nil {
		c.parts(v.Now, est)
	}
	return objectValue(v, est.Utilization, c.target), true
}

// clairvoyantReach is how far past a start-up the clairvoyant reference
// looks: the syncs before its replicas' start-up begins.
const clairvoyantReach = 30 * time.Second

// needOracle asks at each sync for the most any minute needs from now
// until ahead from now, margin above it. The clairvoyant reference looks a
// start-up and clairvoyantReach ahead: replicas asked for now are Ready by
// then, so each minute finds what it needs already loaded. The reactive
// reference looks nowhere ahead: the current minute's need only.
type needOracle struct {
	need   []int
	ahead  time.Duration
	margin float64
	// lookback and quantile: PolicyOptions.ReactiveLookback and
	// ReactiveQuantile.
	lookback int
	quantile float64
	// seasonalAhead, when above 0, adds the needs one period before the
	// minutes up to seasonalAhead from now, once a period is seen.
	seasonalAhead time.Duration
}

func (c needOracle) Recommend(v View) (int, bool) {
	now := v.Now.Sub(origin)
	from, to := int(now/time.Minute), int((now+c.ahead)/time.Minute)
	want := 1
	if c.lookback > 0 {
		want = c.pastQuantile(from)
	} else {
		for m := from; m <= to && m < len(c.need); m++ {
			want = max(want, c.withMargin(c.need[m]))
		}
	}
	if c.seasonalAhead > 0 && from < len(c.need) {
		if p := seasonalPeriod(c.need[:from+1]); p > 0 {
			for m := from + 1; m <= int((now+c.seasonalAhead)/time.Minute); m++ {
				if k := m - p; k >= 0 && k <= from {
					want = max(want, c.withMargin(c.need[k]))
				}
			}
		}
	}
	return want, true
}

// seasonalPeriod is the period, in minutes, with which the needs seen
// repeat: the lag P (at least 2, and at most half of what was seen, so
// that a whole period is compared at least once) whose seasonal-naive
// prediction, each minute's need from the need P minutes before, errs
// least in mean absolute terms, provided it errs less than the naive
// prediction from the minute before. 0 when no lag does: then the last
// minute predicts the next as well as any period would.
func seasonalPeriod(seen []int) int {
	errAt := func(p int) float64 {
		var sum float64
		for i := p; i < len(seen); i++ {
			sum += math.Abs(float64(seen[i] - seen[i-p]))
		}
		return sum / float64(len(seen)-p)
	}
	if len(seen) < 4 {
		return 0
	}
	best, bestErr := 0, errAt(1)
	for p := 2; p <= len(seen)/2; p++ {
		if e := errAt(p); e < bestErr {
			best, bestErr = p, e
		}
	}
	return best
}

// pastQuantile is the quantile of the needs of minute m and the lookback
// minutes before it, margin above it.
func (c needOracle) pastQuantile(m int) int {
	var seen []int
	for k := max(m-c.lookback, 0); k <= m && k < len(c.need); k++ {
		seen = append(seen, c.need[k])
	}
	if len(seen) == 0 {
		return 1
	}
	slices.Sort(seen)
	q := min(max(c.quantile, 0), 1)
	i := max(int(math.Ceil(q*float64(len(seen))))-1, 0)
	return max(1, c.withMargin(seen[i]))
}

// withMargin is n replicas and the margin above them, rounded up.
func (c needOracle) withMargin(n int) int {
	return int(math.Ceil(float64(n) * (1 + c.margin)))
}

// scheduled asks for each step's count from its time on, the last step
// whose time has come; before the first, for the replicas it has: a policy
// that knows the future, to bound what any policy could do. With the
// schedule policy's hour-long scale-down window it never scales down.
type scheduled []scheduleStep

type scheduleStep struct {
	at time.Duration
	n  int
}

// parseSchedule reads DURATION:N[,DURATION:N...], in any order.
func parseSchedule(spec string) (scheduled, error) {
	var steps scheduled
	for part := range strings.SplitSeq(spec, ",") {
		at, n, ok := strings.Cut(part, ":")
		d, err := time.ParseDuration(at)
		if err != nil || !ok || d < 0 {
			return nil, fmt.Errorf("--schedule %q: want DURATION:N[,DURATION:N...], got %q", spec, part)
		}
		k, err := strconv.Atoi(n)
		if err != nil || k < 1 {
			return nil, fmt.Errorf("--schedule %q: %q is not a replica count", spec, n)
		}
		steps = append(steps, scheduleStep{at: d, n: k})
	}
	slices.SortStableFunc(steps, func(a, b scheduleStep) int { return cmp.Compare(a.at, b.at) })
	return steps, nil
}

func (s scheduled) Recommend(v View) (int, bool) {
	n := v.Spec
	for _, st := range s {
		if v.Now.Sub(origin) >= st.at {
			n = st.n
		}
	}
	return n, true
}
