// Package recommend turns what was measured about an HPA's workload (pod
// start-up times, GPUs per replica and per node, grace periods) and the
// cluster autoscaler's settings into a recommended HPA behavior, with the
// reason for every number and warnings for settings that waste GPUs or
// thrash. It is pure: the caller gathers the inputs.
package recommend

import (
	"fmt"
	"math"
	"slices"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// CapacityTarget is the value an HPA holds inference_capacity_utilization
// at: the replicas the signal asks for, plus a quarter. The signal sizes
// for each moment's demand; a new replica serves a start-up after it is
// asked for, and the HPA acts only beyond its 10% tolerance, so a fleet
// held at exactly the demand is short whenever the demand grows. A
// reference that knows each minute's need exactly as the minute starts
// (offlinereplay's reactive reference) still needed a quarter above it to
// meet the SLO minutes static provisioning meets on every shape of the
// workload family without lulls; nothing less did (docs/autoscaling.md,
// "Robustness"). The quarter was chosen on the family drawn with its seed
// and checked on two other draws.
const CapacityTarget = 0.8

// CapacityTargetValue is CapacityTarget as an HPA's target value (800m).
func CapacityTargetValue() *resource.Quantity {
	return resource.NewMilliQuantity(int64(math.Round(1000*CapacityTarget)), resource.DecimalSI)
}

// Autoscaler holds the cluster autoscaler settings that shape advice;
// names follow its flags.
type Autoscaler struct {
	UnneededTime            time.Duration // --scale-down-unneeded-time
	DelayAfterAdd           time.Duration // --scale-down-delay-after-add
	GPUUtilizationThreshold float64       // --scale-down-gpu-utilization-threshold
	MaxGracefulTermination  time.Duration // --max-graceful-termination-sec
}

// DefaultAutoscaler is the cluster autoscaler's defaults.
func DefaultAutoscaler() Autoscaler {
	return Autoscaler{UnneededTime: 10 * time.Minute, DelayAfterAdd: 10 * time.Minute,
		GPUUtilizationThreshold: 0.5, MaxGracefulTermination: 600 * time.Second}
}

// Workload is what was measured about one HPA and its target.
type Workload struct {
	HPA    string // namespace/name
	Target string // Kind/name
	// Startup holds creation-to-Ready times of the target's current pods.
	Startup []time.Duration
	// GPUsPerPod is a replica's GPU request; GPUsPerNode the allocatable
	// GPUs of the nodes it runs on (0: unknown).
	GPUsPerPod, GPUsPerNode int64
	// TerminationGracePeriod is the pod template's (30s when unset).
	TerminationGracePeriod time.Duration
	// Current is the HPA's behavior today (nil: the HPA's defaults).
	Current *autoscalingv2.HorizontalPodAutoscalerBehavior
	// Streams is the merged request-duration histogram of the target's
	// pods (see Streams); nil when none was read. Container names the
	// serving container the preStop hook belongs to.
	Streams   *histogram.Histogram
	Container string
	// ShutdownTimeout is the serving container's --shutdown-timeout (vLLM
	// 0.18 and later): after SIGTERM it finishes its streams for up to
	// that long and exits once it holds none. Zero when it passes none: a
	// server that aborts what it holds at SIGTERM.
	ShutdownTimeout time.Duration
	// StreamErrors says which pods' histograms could not be read.
	StreamErrors []string
	// SignalWindow is the adapter's --ttft-window, the window the capacity
	// signal measures TTFT and prefill times over (0: DefaultSignalWindow).
	SignalWindow time.Duration
	// ClosedLoop says the HPA reads the capacity signal of a pool that
	// serves whole requests, whose closed loop corrects the model by the
	// TTFT its servers measure. A prefill or decode pool's signal holds
	// its loop open (provider.RoleCapacityConfig), and other metrics have
	// none.
	ClosedLoop bool
}

// DefaultSignalWindow is the adapter's default --ttft-window.
const DefaultSignalWindow = time.Minute

// Recommendation is the advice for one HPA.
type Recommendation struct {
	Workload Workload
	// StartupP95 is the 95th percentile of Startup (0 when nothing was
	// measured).
	StartupP95 time.Duration
	Behavior   autoscalingv2.HorizontalPodAutoscalerBehavior
	// Reasons explains every number, keyed by its YAML path under
	// behavior (for example "scaleDown.policies[0].periodSeconds").
	Reasons  map[string]string
	Warnings []string
	// Drain is the pod-template advice that lets a removed replica finish
	// its streams.
	Drain Drain
}

// Tuning constants, each explained where it is used.
const (
	hpaSyncPeriod          = 15 * time.Second  // the HPA controller's default --horizontal-pod-autoscaler-sync-period
	hpaDefaultStabilize    = 300 * time.Second // the HPA's default scale-down stabilization window
	minScaleDownStabilize  = 60 * time.Second
	scaleUpPods            = 4
	scaleDownPercent       = 10 // the HPA controller's default --horizontal-pod-autoscaler-tolerance
	defaultTerminationWait = 30 * time.Second
)

// Recommend computes the advice for one workload.
func Recommend(w Workload, ca Autoscaler) Recommendation {
	r := Recommendation{Workload: w, StartupP95: Percentile(w.Startup, 0.95), Reasons: map[string]string{}}
	r.Behavior.ScaleUp = r.scaleUp()
	r.Behavior.ScaleDown = r.scaleDown(ca)
	r.Warnings = warnings(w, ca, r.StartupP95)
	r.Drain = RecommendDrain(w.Streams, ca).forServerTimeout(w.ShutdownTimeout)
	for _, e := range w.StreamErrors {
		r.Drain.Warnings = append(r.Drain.Warnings, "stream lengths: "+e)
	}
	return r
}

func (r *Recommendation) scaleUp() *autoscalingv2.HPAScalingRules {
	startup := "a new replica needs its start-up time before it serves"
	if r.StartupP95 > 0 {
		startup = fmt.Sprintf("a new replica serves only after its start-up time (p95 %v)", r.StartupP95)
	}
	period := int32(hpaSyncPeriod.Seconds())
	r.Reasons["scaleUp.stabilizationWindowSeconds"] = "scale up at once: " + startup + ", so every sync spent waiting adds to the queue"
	r.Reasons["scaleUp.selectPolicy"] = "the larger of the two policies, so both small and large workloads grow fast"
	r.Reasons["scaleUp.policies[0].value"] = "up to double the replicas per period when many run"
	r.Reasons["scaleUp.policies[0].periodSeconds"] = "one HPA sync period (15s by default)"
	r.Reasons["scaleUp.policies[1].value"] = fmt.Sprintf("or %d replicas per period when few run, so 1 replica is not stuck doubling", scaleUpPods)
	r.Reasons["scaleUp.policies[1].periodSeconds"] = "one HPA sync period"
	return &autoscalingv2.HPAScalingRules{
		StabilizationWindowSeconds: ptr(int32(0)),
		SelectPolicy:               ptr(autoscalingv2.MaxChangePolicySelect),
		Policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: period},
			{Type: autoscalingv2.PodsScalingPolicy, Value: scaleUpPods, PeriodSeconds: period},
		},
	}
}

func (r *Recommendation) scaleDown(ca Autoscaler) *autoscalingv2.HPAScalingRules {
	window := hpaDefaultStabilize
	why := fmt.Sprintf("no Ready pod to measure start-up from: the HPA's default %v", hpaDefaultStabilize)
	if r.StartupP95 > 0 {
		// The HPA keeps one recommendation per sync, so a window of whole
		// sync periods holds the syncs of a start-up and no more; a coarser
		// step holds a fleet the load no longer needs (a 63 s start-up
		// rounded to 30 s was held 90 s).
		window = max(minScaleDownStabilize, roundUp(r.StartupP95, hpaSyncPeriod))
		why = fmt.Sprintf("no shorter than the start-up p95 (%v over %d pods, rounded up to the HPA's %v sync period, at least %v): "+
			"a replica removed in a dip shorter than that is needed again before a new one could be Ready",
			r.StartupP95, len(r.Workload.Startup), hpaSyncPeriod, minScaleDownStabilize)
	}
	r.Reasons["scaleDown.stabilizationWindowSeconds"] = why
	r.Reasons["scaleDown.policies[0].value"] = "one replica at a time in a small fleet: each removal takes the replica with the lowest deletion cost " +
		"(gpuscale's scale-down controller puts the emptiest GPU node's first), so nodes empty one by one"
	period := r.scaleDownPeriod(window)
	r.Reasons["scaleDown.policies[0].periodSeconds"] = r.scaleDownPeriodReason(period, window)
	r.Reasons["scaleDown.policies[1].value"] = fmt.Sprintf("or a tenth of the fleet when that is more (the HPA takes the larger): %d%%, the HPA's "+
		"tolerance, a step that moves the signal about as much as the HPA treats as no change. One replica a period alone would "+
		"make a fleet's drain grow with its size", scaleDownPercent)
	r.Reasons["scaleDown.policies[1].periodSeconds"] = "the same period"
	if perNode := r.replicasPerNode(); perNode > 0 {
		empty := window + time.Duration(perNode-1)*period
		r.Reasons["scaleDown"] = fmt.Sprintf("a node of %d replicas empties about %v after the load drops, one replica a step (a larger fleet takes a tenth); the cluster autoscaler "+
			"removes it %v later (--scale-down-unneeded-time), and not within %v of its last scale-up (--scale-down-delay-after-add)",
			perNode, empty, ca.UnneededTime, ca.DelayAfterAdd)
	}
	return &autoscalingv2.HPAScalingRules{
		StabilizationWindowSeconds: ptr(int32(window.Seconds())),
		Policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: int32(period.Seconds())},
			{Type: autoscalingv2.PercentScalingPolicy, Value: scaleDownPercent, PeriodSeconds: int32(period.Seconds())},
		},
	}
}

func (r *Recommendation) signalWindow() time.Duration {
	if r.Workload.SignalWindow > 0 {
		return r.Workload.SignalWindow
	}
	return DefaultSignalWindow
}

// scaleDownPeriod is the time between two removals, given the scale-down
// stabilization window: the signal's window in whole syncs, and for the
// capacity signal with its loop closed the stabilization window after it.
//
// The capacity a removed replica took counts as gone at the next sync, and
// the measurements a signal without a closed loop rests on (for a role's
// capacity signal the prefill work, the KV in use, their spread across
// replicas over the window) show the smaller fleet within a window. A
// closed loop also corrects the model by the TTFT the fleet gives,
// measured over the window, and it integrates: a miss it reads while the
// fleet is one replica too small raises its correction for a start-up
// horizon or more. So before it removes another replica the removal must
// show in the window's TTFT, and then the HPA, which scales down only to
// the most it was asked for over its stabilization window, must have been
// asked with the removal shown for a whole window. On the workload family
// at the adapter's defaults (a 60 s window, a 75 s stabilization window)
// the scale events fell from 262 to 229 (docs/autoscaling.md, "Round
// eight").
func (r *Recommendation) scaleDownPeriod(stabilization time.Duration) time.Duration {
	period := roundUp(r.signalWindow(), hpaSyncPeriod)
	if r.Workload.ClosedLoop {
		period += stabilization
	}
	return period
}

func (r *Recommendation) scaleDownPeriodReason(period, stabilization time.Duration) string {
	window := fmt.Sprintf("the signal's window (the adapter's --ttft-window, %v, rounded up to the HPA's %v sync)", r.signalWindow(), hpaSyncPeriod)
	if !r.Workload.ClosedLoop {
		return fmt.Sprintf("%v: %s. The capacity a removed replica took counts as gone at the next sync, and what a signal without a "+
			"closed loop rests on shows the removal within its window", period, window)
	}
	return fmt.Sprintf("%v: %s, then the %v stabilization window. The signal's closed loop corrects by the TTFT measured over the window, "+
		"so a removal waits until the last one shows there and the HPA's window holds no recommendation made before it did", period, window, stabilization)
}

func (r *Recommendation) replicasPerNode() int64 {
	w := r.Workload
	if w.GPUsPerPod <= 0 || w.GPUsPerNode <= 0 {
		return 0
	}
	return w.GPUsPerNode / w.GPUsPerPod
}

func warnings(w Workload, ca Autoscaler, p95 time.Duration) []string {
	var out []string
	if w.GPUsPerNode > 0 && w.GPUsPerPod > 0 {
		one := float64(w.GPUsPerPod) / float64(w.GPUsPerNode)
		if ca.GPUUtilizationThreshold <= one {
			out = append(out, fmt.Sprintf("--scale-down-gpu-utilization-threshold %g is not above %d/%d: a node with one %d-GPU replica "+
				"stays above the threshold and is never removed, its other %d GPUs idle; set it above %.3g",
				ca.GPUUtilizationThreshold, w.GPUsPerPod, w.GPUsPerNode, w.GPUsPerPod, w.GPUsPerNode-w.GPUsPerPod, one))
		}
	}
	grace := w.TerminationGracePeriod
	if grace == 0 {
		grace = defaultTerminationWait
	}
	if ca.MaxGracefulTermination > 0 && grace > ca.MaxGracefulTermination {
		out = append(out, fmt.Sprintf("terminationGracePeriodSeconds %d is over the cluster autoscaler's --max-graceful-termination-sec %d: "+
			"when it drains a node it kills the pod after %d s, cutting requests still in flight",
			int(grace.Seconds()), int(ca.MaxGracefulTermination.Seconds()), int(ca.MaxGracefulTermination.Seconds())))
	}
	if p95 > 0 {
		current := hpaDefaultStabilize
		if w.Current != nil && w.Current.ScaleDown != nil && w.Current.ScaleDown.StabilizationWindowSeconds != nil {
			current = time.Duration(*w.Current.ScaleDown.StabilizationWindowSeconds) * time.Second
		}
		if current < p95 {
			out = append(out, fmt.Sprintf("the HPA scales down after %v of lower load, faster than its pods start (p95 %v): "+
				"replicas removed in a short dip are needed again before replacements are Ready", current, p95))
		}
	}
	if len(w.Startup) == 0 {
		out = append(out, "no Ready pods: start-up time not measured")
	}
	return out
}

// StartupTime is a pod's creation-to-Ready time: when its Ready condition
// last turned True. A pod whose readiness flapped since reports the later
// transition, so this errs long.
func StartupTime(p *corev1.Pod) (time.Duration, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			d := c.LastTransitionTime.Sub(p.CreationTimestamp.Time)
			return d, d >= 0
		}
	}
	return 0, false
}

// Percentile is the nearest-rank q-quantile of ds (0 when empty).
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func roundUp(d, step time.Duration) time.Duration {
	return (d + step - 1) / step * step
}

func ptr[T any](v T) *T { return &v }
