package autoscalebench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"

	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal/recommend"
)

func disaggTestConfig(reqs []trace.Request) DisaggConfig {
	return DisaggConfig{
		Workload: "test", Requests: reqs, Speedup: 6, SLO: 2 * time.Second, ITLSLO: 150 * time.Millisecond,
		ModelLoad: time.Minute, Profile: "l4-llama-3.1-8b", Transfer: func(int) time.Duration { return 50 * time.Millisecond },
		Static: [2]int{2, 2}, Initial: [2]int{1, 1}, MaxReplicas: [2]int{4, 4}, Policies: DisaggPolicies,
		SampleEvery: 5 * time.Second, Grace: time.Minute,
	}
}

// TestDisaggPlanDrainsEachPool: each pool drains for its own part of the
// requests, as `adapter recommend` reads it from the pool's servers: a
// prefill's stream ends with its first token, long before a decode's.
func TestDisaggPlanDrainsEachPool(t *testing.T) {
	var reqs []trace.Request
	for i := range 240 {
		reqs = append(reqs, trace.Request{At: time.Duration(i) * 2 * time.Second, ContextTokens: 1500, GeneratedTokens: 400})
	}
	p, err := NewDisaggPlan(disaggTestConfig(reqs))
	if err != nil {
		t.Fatal(err)
	}
	pre, dec := p.Drain[0], p.Drain[1]
	t.Logf("prefill: preStop %v grace %v; decode: preStop %v grace %v", pre.PreStop, pre.Grace, dec.PreStop, dec.Grace)
	if pre.PreStop <= 0 || pre.PreStop >= dec.PreStop {
		t.Errorf("prefill pool's preStop %v, decode's %v: want a positive one shorter than the decode pool's", pre.PreStop, dec.PreStop)
	}
	// 400 tokens at the L4's 20-30 ms a step take 8-12 s.
	if dec.PreStop < 8*time.Second {
		t.Errorf("decode pool's preStop %v does not cover a 400-token stream", dec.PreStop)
	}
	for k := range disaggPools {
		d := p.poolDeployment("ns", k, 1, true)
		tmpl := d.Spec.Template
		if got := provider.RoleOf(tmpl.Labels); got != disaggPools[k] {
			t.Errorf("pool %d's pods have role %q, want %q", k, got, disaggPools[k])
		}
		// The drain of a vLLM that exits once idle, in wall time: a
		// 1 s sleep (the 5 s endpoint lag), the streams' timeout.
		c := tmpl.Spec.Containers[0]
		want := fmt.Sprintf("--shutdown-timeout=%d", int64(math.Ceil(p.Drain[k].Wait.ShutdownTimeout.Seconds()/6)))
		if c.Lifecycle.PreStop.Sleep.Seconds != 1 || !slices.Contains(c.Args, want) ||
			*tmpl.Spec.TerminationGracePeriodSeconds <= 1+int64(math.Ceil(p.Drain[k].Wait.ShutdownTimeout.Seconds()/6)) {
			t.Errorf("pool %d: sleep %d s, args %v, grace %d s; want 1 s, %s and a grace over both", k, c.Lifecycle.PreStop.Sleep.Seconds, c.Args, *tmpl.Spec.TerminationGracePeriodSeconds, want)
		}
		if plain := p.poolDeployment("ns", k, 1, false); provider.RoleOf(plain.Spec.Template.Labels) != provider.RoleNone {
			t.Errorf("pool %d without roles: labels %v", k, plain.Spec.Template.Labels)
		}
	}
}

func TestNewDisaggPlanRejects(t *testing.T) {
	reqs := []trace.Request{{At: 0, ContextTokens: 100, GeneratedTokens: 10}}
	for name, tc := range map[string]struct {
		edit func(*DisaggConfig)
		want string
	}{
		"no requests":     {func(c *DisaggConfig) { c.Requests = nil }, "no requests"},
		"slow":            {func(c *DisaggConfig) { c.Speedup = 0.5 }, "speedup"},
		"no ITL":          {func(c *DisaggConfig) { c.ITLSLO = 0 }, "SLOs"},
		"no transfer":     {func(c *DisaggConfig) { c.Transfer = nil }, "transfer"},
		"max under start": {func(c *DisaggConfig) { c.MaxReplicas[1] = 0 }, "decode pool"},
		"policy":          {func(c *DisaggConfig) { c.Policies = []string{"queue-depth"} }, "queue-depth"},
		"profile":         {func(c *DisaggConfig) { c.Profile = "tpu" }, "tpu"},
	} {
		cfg := disaggTestConfig(reqs)
		tc.edit(&cfg)
		if _, err := NewDisaggPlan(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one naming %q", name, err, tc.want)
		}
	}
}

// TestDisaggAutoscalerIsTheREADMEs: every autoscaled pool's HPA is the one
// the README advises (deploy/examples/hpa-capacity.yaml): the capacity
// signal at recommend.CapacityTarget, the pool's maximum, `adapter
// recommend`'s behavior; per-role on the Deployment's Object metric,
// single-pool on the model's External one.
func TestDisaggAutoscalerIsTheREADMEs(t *testing.T) {
	reqs := []trace.Request{{At: 0, ContextTokens: 100, GeneratedTokens: 10}}
	p, err := NewDisaggPlan(disaggTestConfig(reqs))
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []string{DisaggPerRole, DisaggSinglePool} {
		for pool := range disaggPools {
			h, err := p.disaggAutoscaler(policy, "ns", pool)
			if err != nil {
				t.Fatal(err)
			}
			m := h.Spec.Metrics[0]
			var target autoscalingv2.MetricTarget
			switch policy {
			case DisaggPerRole:
				if m.Object == nil || m.Object.DescribedObject.Name != poolName(disaggPools[pool]) {
					t.Fatalf("%s pool %d: metric %+v, want its Deployment's Object metric", policy, pool, m)
				}
				target = m.Object.Target
			case DisaggSinglePool:
				if m.External == nil {
					t.Fatalf("%s pool %d: metric %+v, want the model's External metric", policy, pool, m)
				}
				target = m.External.Target
			}
			if target.Value == nil || target.Value.Cmp(*recommend.CapacityTargetValue()) != 0 {
				t.Errorf("%s pool %d: target %v, want the README's %v", policy, pool, target.Value, recommend.CapacityTargetValue())
			}
			if h.Spec.MaxReplicas != int32(p.MaxReplicas[pool]) || h.Spec.Behavior == nil {
				t.Errorf("%s pool %d: maxReplicas %d (want %d), behavior %v", policy, pool, h.Spec.MaxReplicas, p.MaxReplicas[pool], h.Spec.Behavior)
			}
		}
	}
}
