package autoscalebench

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/internal/harness/devenv"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal/recommend"
)

// The disaggregated workload's policies, named as the offline replay
// names them (offlinereplay.DisaggPolicies).
const (
	// DisaggStatic keeps each pool at its static size.
	DisaggStatic = "static"
	// DisaggSinglePool runs both pools' HPAs on the model's one External
	// inference_capacity_utilization, its pods carrying no role: what a
	// model served disaggregated gets from gpuscale without role labels.
	DisaggSinglePool = "single-pool"
	// DisaggPerRole runs each pool's HPA on its Deployment's
	// inference_capacity_utilization, its pods labelled with their role
	// (provider.RolePodLabel): the prefill pool's prefill term within
	// what the decode pool's TTFT leaves of the objective, the decode
	// pool's KV and ITL terms.
	DisaggPerRole = "per-role"
)

// DisaggPolicies are the disaggregated bench's policies, in report order.
var DisaggPolicies = []string{DisaggStatic, DisaggSinglePool, DisaggPerRole}

// Pools of a disaggregated model, each a Deployment in the policy's
// namespace whose pods carry the role (per-role) or none.
var disaggPools = [2]provider.Role{provider.RolePrefill, provider.RoleDecode}

// poolName is the Deployment (and app label) of a role's pool.
func poolName(role provider.Role) string { return workloadName + "-" + string(role) }

// DisaggConfig is a replay of a model served by a prefill pool and a
// decode pool through the real HPA controller and adapter. Durations are
// in trace time unless they say otherwise.
type DisaggConfig struct {
	// Workload names the requests, for the report.
	Workload string
	Requests []trace.Request
	// Speedup is how many times faster than real time the requests play.
	Speedup float64
	// SLO and ITLSLO are the objectives a minute is judged on: the p90 of
	// its requests' times to first token (arrival to the decode replica's
	// first token) and of their token gaps.
	SLO, ITLSLO time.Duration
	ModelLoad   time.Duration
	Profile     string
	// Transfer is how long a request's KV cache of so many prompt tokens
	// takes to reach its decode replica.
	Transfer func(promptTokens int) time.Duration
	// Static is each pool's static size, found offline in hindsight
	// (offlinereplay.StaticDisagg); Initial every autoscaled pool's size
	// at the start; MaxReplicas each autoscaled pool's HPA's maximum.
	Static, Initial, MaxReplicas [2]int
	Policies                     []string
	SampleEvery                  time.Duration
	// Grace is how long the replay waits after the last arrival for
	// streams still running.
	Grace time.Duration
	Log   *slog.Logger
}

// DisaggPlan is a DisaggConfig checked: its duration and the pools' drain.
type DisaggPlan struct {
	DisaggConfig
	// Duration is the slice billed: to the last arrival.
	Duration time.Duration
	// Drain is each pool's preStop and grace, from its part of the
	// requests' stream lengths on static's pool, as `adapter recommend`
	// derives them from the pool's servers: a prefill's, a decode's from
	// its cache's arrival.
	Drain [2]recommend.Drain
}

// poolRequest is what a pool's server is asked of r: the prefill pool
// computes the prompt and its first token, the decode pool takes the KV
// cache over and generates every token.
func poolRequest(pool int) func(trace.Request) inferencesim.Request {
	if disaggPools[pool] == provider.RolePrefill {
		return func(r trace.Request) inferencesim.Request {
			return inferencesim.Request{ContextTokens: r.ContextTokens, GeneratedTokens: 1}
		}
	}
	return func(r trace.Request) inferencesim.Request {
		return inferencesim.Request{ContextTokens: r.ContextTokens, GeneratedTokens: r.GeneratedTokens, KVReady: true}
	}
}

// NewDisaggPlan checks cfg.
func NewDisaggPlan(cfg DisaggConfig) (*DisaggPlan, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if len(cfg.Requests) == 0 {
		errs = append(errs, errors.New("no requests"))
	}
	if !(cfg.Speedup >= 1) || math.IsInf(cfg.Speedup, 0) {
		errs = append(errs, fmt.Errorf("speedup must be at least 1, got %v", cfg.Speedup))
	}
	if cfg.SLO <= 0 || cfg.ITLSLO <= 0 || cfg.SampleEvery <= 0 || cfg.ModelLoad < 0 || cfg.Grace < 0 {
		errs = append(errs, errors.New("SLOs and sample interval must be positive, model load and grace not negative"))
	}
	if cfg.Transfer == nil {
		errs = append(errs, errors.New("no KV transfer time"))
	}
	for i := range disaggPools {
		if cfg.Static[i] < 1 || cfg.Initial[i] < 1 || cfg.MaxReplicas[i] < cfg.Initial[i] {
			errs = append(errs, fmt.Errorf("%s pool: static %d, initial %d, max %d: need at least one, and max at least initial",
				disaggPools[i], cfg.Static[i], cfg.Initial[i], cfg.MaxReplicas[i]))
		}
	}
	for _, p := range cfg.Policies {
		if !slices.Contains(DisaggPolicies, p) {
			errs = append(errs, fmt.Errorf("unknown disaggregated policy %q (known: %v)", p, DisaggPolicies))
		}
	}
	if len(cfg.Policies) == 0 {
		errs = append(errs, errors.New("no policies"))
	}
	profile, err := inferencesim.ProfileByName(cfg.Profile)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("autoscalebench: %w", errors.Join(errs...))
	}
	p := &DisaggPlan{DisaggConfig: cfg, Duration: cfg.Requests[len(cfg.Requests)-1].At + time.Second}
	for k := range disaggPools {
		if p.Drain[k], err = streamDrainAs(cfg.Requests, profile, cfg.Static[k], poolRequest(k)); err != nil {
			return nil, fmt.Errorf("%s pool: %w", disaggPools[k], err)
		}
	}
	return p, nil
}

// behavior is `adapter recommend`'s advice for the pools' start-up, the
// model load after Scheduling, which both pools' HPAs run and whose
// scale-down window the start's hold lasts (releaseStart). A role's pool
// reads a signal whose loop the adapter holds open
// (provider.RoleCapacityConfig); single-pool's HPAs read the model's, whose
// loop is closed.
func (p *DisaggPlan) behavior(policy string) *autoscalingv2.HorizontalPodAutoscalerBehavior {
	return recommendedBehavior(p.ModelLoad+Scheduling, policy == DisaggSinglePool, p.Speedup)
}

func (p *DisaggPlan) wall(d time.Duration) time.Duration {
	return time.Duration(float64(d) / p.Speedup)
}

// gpus is what every policy's pools need at their largest.
func (p *DisaggPlan) gpus() int {
	n := 0
	for _, policy := range p.Policies {
		sizes := p.MaxReplicas
		if policy == DisaggStatic {
			sizes = p.Static
		}
		n += sizes[0] + sizes[1]
	}
	return n
}

// EnvOptions are the environment's options, as Plan.EnvOptions gives them,
// with the adapter's ITL objective the run is judged on.
func (p *DisaggPlan) EnvOptions(dir string, clock *Clock, log *slog.Logger) devenv.Options {
	return envOptions(dir, clock, log, p.Speedup, p.SLO, p.gpus(),
		"--capacity-itl-objective="+p.ITLSLO.String())
}

// poolDeployment is a pool's Deployment: the bench's simulated vLLM
// server, draining as `adapter recommend` advises for a vLLM that exits
// once idle (--shutdown-timeout, recommend.WaitDrain: disaggregated
// serving needs a vLLM that has it), its pods labelled with their role
// when the policy reads roles.
func (p *DisaggPlan) poolDeployment(namespace string, pool int, replicas int32, labelRole bool) *appsv1.Deployment {
	role := disaggPools[pool]
	var labels map[string]string
	if labelRole {
		labels = map[string]string{provider.RolePodLabel: string(role)}
	}
	return namedWorkload(namespace, poolName(role), p.Profile, replicas, p.wall(p.ModelLoad), labels,
		func(t *corev1.PodTemplateSpec) { waitDrainPod(t, p.Drain[pool].Wait, p.Speedup) })
}

// disaggModel is the model both pools serve, under its Hugging Face id, as
// an External metric's selector names it: by its label value
// (provider.ModelLabelValue), since a selector's value cannot hold '/'.
var disaggModel = provider.ModelLabelValue(inferencesim.DefaultModel)

// disaggAutoscaler is a pool's HPA under policy, with `adapter recommend`'s
// behavior for the model load, compressed by the speedup.
func (p *DisaggPlan) disaggAutoscaler(policy, namespace string, pool int) (*autoscalingv2.HorizontalPodAutoscaler, error) {
	name := poolName(disaggPools[pool])
	target := autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: recommend.CapacityTargetValue()}
	var metric autoscalingv2.MetricSpec
	switch policy {
	case DisaggPerRole:
		metric = autoscalingv2.MetricSpec{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{
			DescribedObject: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
			Metric:          autoscalingv2.MetricIdentifier{Name: provider.CapacityUtilization},
			Target:          target,
		}}
	case DisaggSinglePool:
		metric = autoscalingv2.MetricSpec{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
			Metric: autoscalingv2.MetricIdentifier{Name: provider.CapacityUtilization, Selector: &metav1.LabelSelector{
				MatchLabels: map[string]string{provider.ModelLabel: disaggModel}}},
			Target: target,
		}}
	default:
		return nil, fmt.Errorf("autoscalebench: disaggregated policy %q has no HPA", policy)
	}
	// The pool's start until releaseStart lowers it.
	minR, maxR := int32(p.Initial[pool]), int32(p.MaxReplicas[pool])
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
			MinReplicas:    &minR,
			MaxReplicas:    maxR,
			Metrics:        []autoscalingv2.MetricSpec{metric},
			Behavior:       p.behavior(policy),
		},
	}, nil
}
