package offlinereplay

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal/capacity"
	"github.com/gpuscale/gpuscale/pkg/signal/recommend"
)

// The disaggregated workload's policies (DisaggPolicies).
const (
	// DisaggStatic keeps each pool at its static size.
	DisaggStatic = "static"
	// DisaggPerRole is each pool's HPA on its role's capacity signal
	// (inference_capacity_utilization of a Deployment whose pods carry a
	// role): the prefill pool's from its prefill times within the TTFT
	// objective, the decode pool's from its KV caches and its token gaps
	// within the ITL objective.
	DisaggPerRole = "per-role"
	// DisaggSinglePool is the model's one capacity signal, as for a
	// model served by one pool (the External inference_capacity_
	// utilization of the model, no role): every pod of both pools read
	// as one pool, both pools' HPAs on that value. What a model gets
	// from gpuscale when its pods carry no role label.
	DisaggSinglePool = "single-pool"
)

// DisaggPolicies are the disaggregated workload's policies, in report
// order.
var DisaggPolicies = []string{DisaggStatic, DisaggSinglePool, DisaggPerRole}

// DisaggOptions configure the disaggregated policies.
type DisaggOptions struct {
	// Capacity is the capacity signal's configuration (its TTFT and ITL
	// objectives, window, quantile), as the adapter's flags give it.
	Capacity    capacity.Config
	Startup     time.Duration
	MaxReplicas [numPools]int
	// Parts, when set, is called with every capacity estimate.
	Parts func(now time.Time, pool string, e capacity.Estimate)
}

// NewDisaggPolicy returns the named policy and each pool's HPA behavior:
// `adapter recommend`'s for the start-up time and the signal each pool's
// HPA reads, as for the single-pool workload's recommended policy.
func NewDisaggPolicy(name string, o DisaggOptions) (DisaggPolicy, [numPools]Behavior, error) {
	behaviors := func(cfg [numPools]capacity.Config) (b [numPools]Behavior) {
		for pl := range numPools {
			b[pl] = Recommended(o.Startup, 0, cfg[pl].ClosedLoop(), 1, o.MaxReplicas[pl])
		}
		return b
	}
	switch name {
	case DisaggStatic:
		return nil, [numPools]Behavior{}, nil
	case DisaggPerRole:
		cfg := [numPools]capacity.Config{provider.RoleCapacityConfig(o.Capacity, provider.RolePrefill), provider.RoleCapacityConfig(o.Capacity, provider.RoleDecode)}
		p := &perRole{parts: o.Parts}
		for pl := range numPools {
			p.est[pl] = capacity.New(cfg[pl], nil)
		}
		return p, behaviors(cfg), nil
	case DisaggSinglePool:
		return &singlePool{est: capacity.New(o.Capacity, nil), parts: o.Parts}, behaviors([numPools]capacity.Config{o.Capacity, o.Capacity}), nil
	}
	return nil, [numPools]Behavior{}, fmt.Errorf("unknown disaggregated policy %q (known: %s)", name, strings.Join(DisaggPolicies, ", "))
}

// capacityPods is what the adapter hands the estimator of a pool's pods:
// a decode pool's without prefill times, a prefill pool's without token
// gaps (provider.capacityPods); role-blind, everything. Every pool's TTFT
// histograms go with them, as the adapter's do: the closed loop reads
// them where the configuration leaves it closed.
func capacityPods(v View, role provider.Role) []capacity.Pod {
	pods := make([]capacity.Pod, 0, len(v.Pods))
	for _, p := range v.Pods {
		cp := capacity.Pod{Ready: p.Ready, Loading: p.Loading}
		if p.Ready {
			cp.Startup = p.ReadyAt.Sub(p.Created)
			if p.Data {
				cp.Data, cp.Running, cp.Waiting, cp.KVPercent = true, float64(p.Running), float64(p.Waiting), 100*p.KVUsage
				cp.UID, cp.TTFT = p.Name, p.TTFT
				if role != provider.RoleDecode {
					cp.Prefill = p.Prefill
				}
				if role != provider.RolePrefill {
					cp.ITL = p.ITL
				}
			}
		}
		pods = append(pods, cp)
	}
	return pods
}

// decodeTTFT is what the adapter reads of a decode pool for its prefill
// pool's share of the objective (provider, decodeTTFT): each Ready pod's
// newest TTFT histogram.
func decodeTTFT(v View) []capacity.Pod {
	var pods []capacity.Pod
	for _, p := range v.Pods {
		if p.Ready && p.Data && p.TTFT != nil {
			pods = append(pods, capacity.Pod{Ready: true, UID: p.Name, TTFT: p.TTFT})
		}
	}
	return pods
}

// perRole estimates each pool on its role's signal, an Object metric at
// the README's value (recommend.CapacityTarget) on each pool's HPA.
type perRole struct {
	est   [numPools]*capacity.Estimator
	parts func(time.Time, string, capacity.Estimate)
}

func (p *perRole) Recommend(v DisaggView) (want [numPools]int, ok [numPools]bool) {
	roles := [numPools]provider.Role{provider.RolePrefill, provider.RoleDecode}
	for pl := range numPools {
		k := capacity.Key{Namespace: "replay", Target: "deployment/llm-" + Pool(pl).String()}
		in := capacityPods(v.Pools[pl], roles[pl])
		var (
			est capacity.Estimate
			err error
		)
		if Pool(pl) == Prefill {
			// As the adapter serves it: held to what the decode
			// pool's time to first token (the cache's transfer, a
			// wait, the first step) leaves of the objective.
			est, err = p.est[pl].EstimatePrefillPool(k, v.Now, in, decodeTTFT(v.Pools[Decode]))
		} else {
			est, err = p.est[pl].Estimate(k, v.Now, in)
		}
		if err != nil {
			continue
		}
		if p.parts != nil {
			p.parts(v.Now, Pool(pl).String(), est)
		}
		want[pl], ok[pl] = objectValue(v.Pools[pl], est.Utilization, recommend.CapacityTarget), true
	}
	return want, ok
}

// singlePool reads both pools as the one pool of a model without roles:
// one estimate over every pod, whose utilization (the replicas needed over
// every Ready replica) both pools' HPAs scale by.
type singlePool struct {
	est   *capacity.Estimator
	parts func(time.Time, string, capacity.Estimate)
}

func (p *singlePool) Recommend(v DisaggView) (want [numPools]int, ok [numPools]bool) {
	all := View{Now: v.Now, Pods: append(append([]PodView(nil), v.Pools[Prefill].Pods...), v.Pools[Decode].Pods...)}
	est, err := p.est.Estimate(capacity.Key{Namespace: "replay", Target: "model/llm"}, v.Now, capacityPods(all, provider.RoleNone))
	if err != nil {
		return want, ok
	}
	if p.parts != nil {
		p.parts(v.Now, "model", est)
	}
	for pl := range numPools {
		want[pl], ok[pl] = objectValue(v.Pools[pl], est.Utilization, recommend.CapacityTarget), true
	}
	return want, ok
}
