package autoscalebench

import (
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscale/gpuscale/internal/harness/devenv"
	"github.com/gpuscale/gpuscale/internal/harness/localcluster"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/scaledown"
	"github.com/gpuscale/gpuscale/pkg/signal/recommend"
)

// workloadName is the Deployment (and its app label) in every policy's
// namespace.
const workloadName = "llm"

// Recommended is the policy the README's first example HPA runs, which
// the name PolicyRecommended selects.
const Recommended = PolicyCapacity

// Resolve returns the policy a name selects: PolicyRecommended is
// Recommended, any other name itself; an AbortSuffix stays.
func Resolve(name string) string {
	base, drain := splitPolicy(name)
	if base == PolicyRecommended {
		base = Recommended
	}
	if !drain {
		base += AbortSuffix
	}
	return base
}

// Policies lists every policy, in report order.
var Policies = []string{PolicyGPUUtilization, PolicyQueueDepth, PolicyTTFT, PolicyStatic, PolicyQueueDepthRecommended, PolicyRunningRequests, PolicyLLMD, PolicyCapacity}

// Targets are the HPA targets of the autoscaled policies.
type Targets struct {
	// GPUUtilization is the averageValue of gpu_utilization (percent).
	GPUUtilization float64
	// QueueDepth is the averageValue of inference_queue_depth (requests
	// waiting per pod).
	QueueDepth float64
	// RequestsRunning is the averageValue of inference_requests_running
	// (requests in each replica's batch).
	RequestsRunning float64
	// TTFT is the value of the Deployment's inference_ttft_seconds_p90:
	// the SLO itself.
	TTFT time.Duration
	// ModelLoad, in trace time, is how long a new replica's server loads
	// its model.
	ModelLoad time.Duration
	// Startup, in trace time, is what `adapter recommend` measures of the
	// replicas: creation to Ready, the scheduling before the load
	// included (0: ModelLoad). The recommended policies run its advice.
	Startup time.Duration
}

// Scheduling is a new replica's time from its creation to the start of
// its model load (scheduling, container start), which `adapter
// recommend`'s creation-to-Ready start-up counts beside the load. The
// offline replay starts its replicas that much later (its StartDelay);
// the bench's HPAs get the advice for that start-up, which a pod that
// loads for ModelLoad never takes less than.
const Scheduling = 3 * time.Second

// RecommendStartup is the start-up the recommended policies' behavior is
// advised for: Startup, or ModelLoad where it is not set.
func (t Targets) RecommendStartup() time.Duration {
	if t.Startup > 0 {
		return t.Startup
	}
	return t.ModelLoad
}

// namespaceFor is where a run's workload runs.
func namespaceFor(run string) string { return "replay-" + strings.ReplaceAll(run, "+", "-") }

// describe says in one line what a policy does.
func describe(policy string, t Targets, static, minR, maxR int) string {
	switch policy {
	case PolicyGPUUtilization:
		return fmt.Sprintf("HPA: pods gpu_utilization averageValue %s, %d-%d replicas", fmtFloat(t.GPUUtilization), minR, maxR)
	case PolicyQueueDepth:
		return fmt.Sprintf("HPA: pods inference_queue_depth averageValue %s, %d-%d replicas", fmtFloat(t.QueueDepth), minR, maxR)
	case PolicyQueueDepthRecommended:
		return fmt.Sprintf("as queue-depth, with the behavior `adapter recommend` gives for a %v start-up", t.RecommendStartup())
	case PolicyRunningRequests:
		return fmt.Sprintf("HPA: pods inference_requests_running averageValue %s, %d-%d replicas", fmtFloat(t.RequestsRunning), minR, maxR)
	case PolicyTTFT:
		return fmt.Sprintf("HPA: Deployment inference_ttft_seconds_p90 value %s, %d-%d replicas", t.TTFT, minR, maxR)
	case PolicyCapacity:
		return fmt.Sprintf("HPA: Deployment inference_capacity_utilization value %s, `adapter recommend` behavior, %d-%d replicas", fmtFloat(recommend.CapacityTarget), minR, maxR)
	case PolicyLLMD:
		return fmt.Sprintf("llm-d SLO-aware law: TTFT p90/%s clamped at %g, mean over %v; up above %g, down below %g; %d-%d replicas",
			t.TTFT, llmdClamp, llmdSmoothing, llmdUp, llmdDown, minR, maxR)
	case PolicyStatic:
		return fmt.Sprintf("no autoscaler: %d replicas, the slice's peak need", static)
	}
	return policy
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// workload is a policy's Deployment of simulated vLLM servers: devenv's
// inference Deployment, managed by the adapter's scale-down controller, with
// the replica profile and a model that takes modelLoad (wall time) to load.
// Its pod template drains (drainPod) unless drain is nil.
func workload(namespace, profile string, replicas int32, modelLoad time.Duration, drain func(*corev1.PodTemplateSpec)) *appsv1.Deployment {
	return namedWorkload(namespace, workloadName, profile, replicas, modelLoad, nil, drain)
}

// namedWorkload is workload under another name, its pods carrying labels
// too.
func namedWorkload(namespace, name, profile string, replicas int32, modelLoad time.Duration, labels map[string]string, drain func(*corev1.PodTemplateSpec)) *appsv1.Deployment {
	podLabels := map[string]string{scaledown.ManagedLabel: "managed"}
	maps.Copy(podLabels, labels)
	d := devenv.InferenceDeployment(namespace, name, replicas, podLabels)
	tmpl := &d.Spec.Template
	tmpl.Annotations[localcluster.ReadyAfterAnnotation] = modelLoad.String()
	tmpl.Spec.Containers[0].Env = []corev1.EnvVar{
		{Name: "SIM_MODEL", Value: inferencesim.DefaultModel},
		{Name: "SIM_PROFILE", Value: profile},
	}
	if drain != nil {
		drain(tmpl)
	}
	return d
}

// autoscaler is the HPA of an autoscaled policy, with the controller's
// default behaviour compressed by speedup so that every timer keeps its
// proportion to the trace: scale-down waits 300 s of trace time, and each
// scaling policy's period is 15 s of trace time.
func autoscaler(policy, namespace string, t Targets, minR, maxR int32, speedup float64) (*autoscalingv2.HorizontalPodAutoscaler, error) {
	var metric autoscalingv2.MetricSpec
	switch policy {
	case PolicyGPUUtilization:
		metric = podsMetric("gpu_utilization", t.GPUUtilization)
	case PolicyQueueDepth, PolicyQueueDepthRecommended:
		metric = podsMetric("inference_queue_depth", t.QueueDepth)
	case PolicyRunningRequests:
		metric = podsMetric("inference_requests_running", t.RequestsRunning)
	case PolicyCapacity:
		metric = autoscalingv2.MetricSpec{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{
			DescribedObject: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: workloadName},
			Metric:          autoscalingv2.MetricIdentifier{Name: provider.CapacityUtilization},
			Target:          autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: recommend.CapacityTargetValue()},
		}}
	case PolicyTTFT:
		target := resource.NewMilliQuantity(t.TTFT.Milliseconds(), resource.DecimalSI)
		metric = autoscalingv2.MetricSpec{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{
			DescribedObject: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: workloadName},
			Metric:          autoscalingv2.MetricIdentifier{Name: "inference_ttft_seconds_p90"},
			Target:          autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: target},
		}}
	default:
		return nil, fmt.Errorf("autoscalebench: policy %q has no HPA", policy)
	}
	behavior := defaultBehavior()
	compress(behavior, speedup)
	if policy == PolicyQueueDepthRecommended || policy == PolicyCapacity {
		behavior = recommendedBehavior(t.RecommendStartup(), policy == PolicyCapacity, speedup)
	}
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: workloadName, Namespace: namespace},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: workloadName},
			MinReplicas:    &minR,
			MaxReplicas:    maxR,
			Metrics:        []autoscalingv2.MetricSpec{metric},
			Behavior:       behavior,
		},
	}, nil
}

// recommendedBehavior is `adapter recommend`'s behavior for replicas that
// take startup to start, for an HPA on the capacity signal with its closed
// loop or not (recommend.Workload's ClosedLoop), compressed by speedup.
func recommendedBehavior(startup time.Duration, closedLoop bool, speedup float64) *autoscalingv2.HorizontalPodAutoscalerBehavior {
	rec := recommend.Recommend(recommend.Workload{
		Startup: []time.Duration{startup}, ClosedLoop: closedLoop, GPUsPerPod: 1, GPUsPerNode: 8,
	}, recommend.DefaultAutoscaler())
	compress(&rec.Behavior, speedup)
	return &rec.Behavior
}

// defaultBehavior is the HPA controller's default behavior, written out
// (autoscaling/v2 API reference) so that compress can put it on the
// trace's clock.
func defaultBehavior() *autoscalingv2.HorizontalPodAutoscalerBehavior {
	zero, window := int32(0), int32(300)
	maxSelect := autoscalingv2.MaxChangePolicySelect
	return &autoscalingv2.HorizontalPodAutoscalerBehavior{
		ScaleUp: &autoscalingv2.HPAScalingRules{
			StabilizationWindowSeconds: &zero,
			SelectPolicy:               &maxSelect,
			Policies: []autoscalingv2.HPAScalingPolicy{
				{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15},
				{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15},
			},
		},
		ScaleDown: &autoscalingv2.HPAScalingRules{
			StabilizationWindowSeconds: &window,
			SelectPolicy:               &maxSelect,
			Policies: []autoscalingv2.HPAScalingPolicy{
				{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15},
			},
		},
	}
}

// compress divides every period and window of b by speedup, so that each
// keeps its proportion to the trace.
func compress(b *autoscalingv2.HorizontalPodAutoscalerBehavior, speedup float64) {
	for _, rules := range []*autoscalingv2.HPAScalingRules{b.ScaleUp, b.ScaleDown} {
		if rules == nil {
			continue
		}
		if w := rules.StabilizationWindowSeconds; w != nil && *w > 0 {
			*w = compressSeconds(time.Duration(*w)*time.Second, speedup)
		}
		for i := range rules.Policies {
			rules.Policies[i].PeriodSeconds = compressSeconds(time.Duration(rules.Policies[i].PeriodSeconds)*time.Second, speedup)
		}
	}
}

func podsMetric(name string, average float64) autoscalingv2.MetricSpec {
	q := resource.NewMilliQuantity(int64(math.Round(average*1000)), resource.DecimalSI)
	return autoscalingv2.MetricSpec{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
		Metric: autoscalingv2.MetricIdentifier{Name: name},
		Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: q},
	}}
}

// compressSeconds is d of trace time in whole wall seconds, at least one.
func compressSeconds(d time.Duration, speedup float64) int32 {
	return int32(max(1, math.Round(d.Seconds()/speedup)))
}
