package provider

import (
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/gpuscale/gpuscale/pkg/signal/capacity"
)

// Role is a pod's part in prefill/decode disaggregation: a model served by
// a prefill pool, which computes each prompt's KV cache and first token,
// and a decode pool, which takes the KV cache over and generates the rest.
// Each pool gets a capacity signal of its own (docs/metrics.md, "Prefill
// and decode roles").
type Role string

// Roles. A pod without one serves whole requests.
const (
	RoleNone    Role = ""
	RolePrefill Role = "prefill"
	RoleDecode  Role = "decode"
)

// RoleLabel is the external metrics' label that selects a role beside
// ModelLabel, and the pod label gpuscale reads a role from first.
const (
	RoleLabel    = "role"
	RolePodLabel = "gpuscale.io/role"
)

// roleLabels are the pod labels a role is read from, first present wins:
// gpuscale's own, llm-d's (its routing sidecar's and endpoint picker's
// prefill and decode filters select on it; "both" serves whole requests),
// and NVIDIA Dynamo's operator's (set on a disaggregated graph's worker
// pods).
var roleLabels = []string{RolePodLabel, "llm-d.ai/role", "nvidia.com/dynamo-sub-component-type"}

// RoleOf reads the role from a pod's (or a pod template's) labels: the
// first of roleLabels present decides, and a value other than prefill or
// decode ("both", a typo) is no role, so such a pool is estimated as one
// serving whole requests.
func RoleOf(l map[string]string) Role {
	for _, k := range roleLabels {
		if v, ok := l[k]; ok {
			switch Role(v) {
			case RolePrefill, RoleDecode:
				return Role(v)
			}
			return RoleNone
		}
	}
	return RoleNone
}

// modelAndRole reads an external metric's selector: model_name=<model>,
// required, and role=<prefill|decode>, optional, and nothing else.
func modelAndRole(sel labels.Selector) (model string, role Role, ok bool) {
	if sel == nil {
		return "", "", false
	}
	reqs, _ := sel.Requirements()
	for _, r := range reqs {
		v, single := oneValue(r)
		if !single {
			return "", "", false
		}
		switch r.Key() {
		case ModelLabel:
			model = v
		case RoleLabel:
			role = Role(v)
			if role != RolePrefill && role != RoleDecode {
				return "", "", false
			}
		default:
			return "", "", false
		}
	}
	return model, role, model != ""
}

// ExternalRole is the role an external metric's selector names, as the
// provider reads it when it serves the metric: RoleNone for a selector of a
// model alone, and for one it would not serve.
func ExternalRole(sel labels.Selector) Role {
	if _, role, ok := modelAndRole(sel); ok {
		return role
	}
	return RoleNone
}

// oneValue is the value an equality requirement pins.
func oneValue(r labels.Requirement) (string, bool) {
	switch r.Operator() {
	case selection.Equals, selection.DoubleEquals, selection.In:
		if vals := r.Values(); vals.Len() == 1 {
			return vals.UnsortedList()[0], true
		}
	}
	return "", false
}

// RoleCapacityConfig is the capacity signal's configuration for a role's
// pools, from the adapter's. A request's time to first token is its
// prefill pool's time and its decode pool's after it (the cache's
// transfer, a wait for a KV slot, the first step). A prefill pool
// generates no second token, so it has no ITL term, and it does nothing
// but prefill, so its prefill term never gives up (capacity.Config's
// PrefillPool). A decode pool does no prefill of its own, so its estimate
// gets no prefill times (capacityPods); its KV term keeps the share of
// requests that wait for a slot within half the objective's tail
// (quantile 0.95 of a p90 objective), since a slot frees only when a
// stream ends, seconds later, so that a request that waits misses the
// objective, and the other half of the tail is the prefill pool's. A pool
// of whole requests keeps the configuration.
//
// A role's pool holds its closed loop open (its correction bounds 1 and 1:
// the measured quantile is still exported, and corrects nothing). The loop
// corrects the model by the objective's quantile measured over the
// window, and no server of either pool measures the objective's quantity:
// a prefill server's time to first token ends where the cache's transfer
// starts, and a decode server's starts where the transfer ends. Each pool
// would correct itself by its part of a tail, against a share of the
// objective that is itself an estimate (the decode pool's median), so each
// would chase the other pool's error: on the real HPA controller the
// prefill pool's loop read a quiet prefill tail as spare capacity and
// took a tenth to a fifth off the pool, which lost minutes where arrivals
// rose, and the decode pool's read the rush's own backlog as a model error
// and added a quarter to its pool for the rest of the hour.
func RoleCapacityConfig(cfg capacity.Config, role Role) capacity.Config {
	switch role {
	case RolePrefill:
		cfg.ITLObjective = 0
		cfg.PrefillPool = true
	case RoleDecode:
		cfg.Quantile = 1 - (1-cfg.Quantile)/2
	default:
		return cfg
	}
	cfg.MinCorrection, cfg.MaxCorrection = 1, 1
	return cfg
}
