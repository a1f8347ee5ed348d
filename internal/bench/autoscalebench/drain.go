package autoscalebench

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
	"github.com/gpuscale/gpuscale/pkg/signal/recommend"
)

// AbortSuffix after a policy's name (capacity+abort) runs that policy a
// second time, in its own namespace, on replicas whose pod template lacks
// the drain: today's template, where a removed replica's vLLM aborts every
// request it holds at SIGTERM. Every other run's replicas drain.
const AbortSuffix = "+abort"

// DrainMode is how the bench's replicas drain when an HPA removes them.
// `adapter recommend` prints both (recommend.Drain).
type DrainMode string

const (
	// DrainWait is a vLLM 0.18 or later with --shutdown-timeout: after
	// SIGTERM it finishes its own streams and exits once it holds none,
	// so the preStop sleep covers only the endpoint lag
	// (recommend.WaitDrain). vLLM's Kubernetes guide, KServe and llm-d's
	// guides set it, and disaggregated serving needs it.
	DrainWait DrainMode = "wait"
	// DrainSleep is a server that aborts what it holds at SIGTERM: a
	// preStop sleep over the longest stream any replica has served holds
	// a removed replica's GPUs that long, busy or not.
	DrainSleep DrainMode = "sleep"
)

// DrainModes are the modes a Config may name.
var DrainModes = []DrainMode{DrainWait, DrainSleep}

// template returns what puts d on a pod template in this mode, at speedup.
func (m DrainMode) template(d recommend.Drain, speedup float64) func(*corev1.PodTemplateSpec) {
	if m == DrainSleep {
		return func(t *corev1.PodTemplateSpec) { drainPod(t, d, speedup) }
	}
	return func(t *corev1.PodTemplateSpec) { waitDrainPod(t, d.Wait, speedup) }
}

// drainSetup says in a few words how the plan's replicas drain, in trace
// time, for the report.
func (p *Plan) drainSetup() string {
	if p.DrainMode == DrainSleep {
		return fmt.Sprintf("preStop sleep %v (the longest stream), grace %v", p.Drain.PreStop, p.Drain.Grace)
	}
	w := p.Drain.Wait
	return fmt.Sprintf("preStop sleep %v, --shutdown-timeout %v (exits once idle), grace %v", w.PreStop, w.ShutdownTimeout, w.Grace)
}

// splitPolicy returns the policy a run's name runs, and whether its
// replicas drain.
func splitPolicy(name string) (policy string, drain bool) {
	base, abort := strings.CutSuffix(name, AbortSuffix)
	return base, !abort
}

// streamDrain is what `adapter recommend` prints for the slice's replicas:
// the preStop sleep and grace period that cover the longest stream, as a
// vLLM request-duration histogram of the slice's requests on n replicas
// shows it (simulated offline, as StaticNeed sizes the static policy).
func streamDrain(reqs []trace.Request, p inferencesim.Profile, n int) (recommend.Drain, error) {
	return streamDrainAs(reqs, p, n, wholeRequest)
}

// streamDrainAs is streamDrain for a pool that serves as(r) of each
// request r: a disaggregated pool's streams are its part of each request,
// as its servers' own request-duration histograms show them to `adapter
// recommend`.
func streamDrainAs(reqs []trace.Request, p inferencesim.Profile, n int, as func(trace.Request) inferencesim.Request) (recommend.Drain, error) {
	bounds := append(inferencesim.VLLMRequestLatencyBuckets(), math.Inf(1))
	h := &histogram.Histogram{Bounds: bounds, Counts: make([]float64, len(bounds))}
	observe := func(c inferencesim.Completion) {
		s := c.Total.Seconds()
		for i := sort.SearchFloat64s(bounds, s); i < len(bounds); i++ {
			h.Counts[i]++
		}
		h.Count++
		h.Sum += s
	}
	if _, err := simulateAs(reqs, p, max(n, 1), observe, as); err != nil {
		return recommend.Drain{}, err
	}
	d := recommend.RecommendDrain(h, recommend.DefaultAutoscaler())
	if d.PreStop <= 0 {
		return d, fmt.Errorf("autoscalebench: no stream length measured: %v", d.Warnings)
	}
	return d, nil
}

// drainPod puts d on the template's inference container in wall time:
// the bench divides every timer by the speedup, rounding up so that the
// drain covers at least what was recommended.
func drainPod(tmpl *corev1.PodTemplateSpec, d recommend.Drain, speedup float64) {
	wall := func(t time.Duration) int64 { return int64(math.Ceil(t.Seconds() / speedup)) }
	preStop := wall(d.PreStop)
	grace := max(wall(d.Grace), preStop+1)
	tmpl.Spec.TerminationGracePeriodSeconds = &grace
	tmpl.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: preStop}}}
}

// waitDrainPod puts d's drain for a server that exits once idle on the
// template's inference container in wall time, rounding up as drainPod
// does: a sleep for the endpoint lag, vLLM's --shutdown-timeout for the
// streams, and a grace period over both.
func waitDrainPod(tmpl *corev1.PodTemplateSpec, d recommend.WaitDrain, speedup float64) {
	wall := func(t time.Duration) int64 { return int64(math.Ceil(t.Seconds() / speedup)) }
	preStop, timeout := wall(d.PreStop), wall(d.ShutdownTimeout)
	grace := max(wall(d.Grace), preStop+timeout+1)
	c := &tmpl.Spec.Containers[0]
	tmpl.Spec.TerminationGracePeriodSeconds = &grace
	c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: preStop}}}
	c.Args = append(c.Args, fmt.Sprintf("--shutdown-timeout=%d", timeout))
}
