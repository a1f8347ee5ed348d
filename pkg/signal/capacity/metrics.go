package capacity

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// estimateGauges are the parts of an estimate exported per workload and
// model, one entry a gauge: its name after gpuscale_adapter_capacity_, its
// help, and the part of the Estimate it reads. A new part of the estimate
// is exported by one entry here.
var estimateGauges = []struct {
	name, help string
	read       func(Estimate) float64
}{
	{"utilization", "Last inference_capacity_utilization served: forecast demand over what the Ready replicas serve within the objective.",
		func(e Estimate) float64 { return e.Utilization }},
	{"demand_requests", "Requests running or waiting in the Ready replicas at the last estimate.",
		func(e Estimate) float64 { return e.Demand }},
	{"forecast_requests", "Peak requests expected over the start-up horizon (Holt's damped trend).",
		func(e Estimate) float64 { return e.Forecast }},
	{"trend_requests_per_second", "The part of Holt's smoothed trend of the demand that exceeds two standard errors: what the forecast projects.",
		func(e Estimate) float64 { return e.Trend }},
	{"trend_stderr_requests_per_second", "Standard error of Holt's smoothed trend of the demand.",
		func(e Estimate) float64 { return e.TrendStdErr }},
	{"slots_per_replica", "Requests of the current mix one replica's KV cache holds.",
		func(e Estimate) float64 { return e.Slots }},
	{"per_replica_requests", "Requests of the current mix one replica carries with at most the late budget's share finding too little KV free (MaxKVLoad).",
		func(e Estimate) float64 { return e.PerReplica }},
	{"horizon_seconds", "Start-up horizon: median measured creation-to-Ready time of the workload's pods.",
		func(e Estimate) float64 { return e.Horizon.Seconds() }},
	{"ready_replicas", "Ready replicas at the last estimate.",
		func(e Estimate) float64 { return float64(e.Replicas) }},
	{"reporting_replicas", "Ready replicas with fresh values at the last estimate; the demand of the others is their mean.",
		func(e Estimate) float64 { return float64(e.Reporting) }},
	{"loading_replicas", "Replicas still loading at the last estimate.",
		func(e Estimate) float64 { return float64(e.Loading) }},
	{"loading_credit_requests", "Requests the loading replicas will serve once Ready.",
		func(e Estimate) float64 { return e.LoadingCredit }},
	{"replicas_needed", "The larger of the KV-cache and prefill terms: the replicas an HPA at target 1 asks for.",
		func(e Estimate) float64 { return e.Needed }},
	{"kv_replicas_needed", "Forecast demand over per-replica capacity: the replicas the KV caches need.",
		func(e Estimate) float64 { return e.KVNeeded }},
	{"prefill_replicas_needed", "Prefill work, grown as the demand is forecast to grow, over the busy fraction one replica's prefill may run at; 0 without a limit.",
		func(e Estimate) float64 { return e.PrefillNeeded }},
	{"prefill_busy_replicas", "Replicas' worth of prefill work per second over the window: the sum of the replicas' prefill busy fractions.",
		func(e Estimate) float64 { return e.PrefillBusy }},
	{"prefill_backlog_replicas", "The prefill work of the requests waiting now, spread over the horizon, in replicas' worth.",
		func(e Estimate) float64 { return e.PrefillBacklog }},
	{"prefill_max_busy", "Busy fraction one replica's prefill may run at with at most the objective's tail of reachable requests missing it by waiting (G/G/1, Kingman); 0 when unreachable or unmeasured.",
		func(e Estimate) float64 { return e.Prefill.MaxBusy }},
	{"arrival_dispersion", "Index of dispersion across the Ready replicas of the requests each took between estimates (1: a random router; less: round-robin).",
		func(e Estimate) float64 { return e.Dispersion }},
	{"kv_dispersion", "Index of dispersion across the Ready replicas of the share of their KV cache in use.",
		func(e Estimate) float64 { return e.KVDispersion }},
	{"kv_late_budget_ratio", "Share of requests the KV term lets find too little KV free: the objective's tail, widened by the slack.",
		func(e Estimate) float64 { return e.LateBudget }},
	{"residence_seconds", "A request's time in a replica's batch, by Little's law over the window (servers' clock).",
		func(e Estimate) float64 { return e.Residence }},
	{"slack_seconds", "Time a request of the window's mean prefill may wait within the objective.",
		func(e Estimate) float64 { return e.Slack }},
	{"measured_ttft_seconds", "The objective's quantile of the time to first token the servers measured over the window; 0 with too few requests.",
		func(e Estimate) float64 { return e.MeasuredTTFT }},
	{"loop_correction", "The closed loop's factor on the model's replicas (1: none), within [1/2, 2]; time constant one start-up horizon up, two down.",
		func(e Estimate) float64 { return e.Correction }},
	{"prefill_objective_seconds", "The time to first token the prefill term is held to: the objective, or for a disaggregated model's prefill pool what its decode pool's median time to first token over the window leaves of it (at least half).",
		func(e Estimate) float64 { return e.PrefillObjective }},
	{"prefill_over_objective_ratio", "Share of the window's requests whose prefill alone exceeded the TTFT objective.",
		func(e Estimate) float64 { return e.Prefill.OverObjective }},
	{"itl_replicas_needed", "Sequences decoding, grown as the demand is forecast to grow, over what one replica decodes within the ITL objective; 0 without an ITL objective.",
		func(e Estimate) float64 { return e.ITLNeeded }},
	{"itl_quantile_seconds", "The window's inter-token latency at the objective's quantile; 0 without an ITL objective or enough tokens.",
		func(e Estimate) float64 { return e.ITL.Quantile }},
	{"itl_slots_per_replica", "Sequences one replica decodes with its ITL quantile within the ITL objective.",
		func(e Estimate) float64 { return e.ITL.Slots }},
}

// Metrics exports every part of the last estimate of each workload and
// model, so that a scaling decision can be read back (docs/autoscaling.md
// plots them beside the replicas). Series are removed with the state they
// describe.
type Metrics struct {
	gauges []*prometheus.GaugeVec // one per estimateGauges entry, in order
	errors *prometheus.CounterVec
}

// Labels of the per-target series: the namespace, and the target as
// "deployment/<name>", "statefulset/<name>" or "model/<name>".
var labelNames = []string{"namespace", "target"}

// NewMetrics returns the collectors; register them with Collectors.
func NewMetrics() *Metrics {
	m := &Metrics{errors: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpuscale_adapter_capacity_estimate_errors_total",
		Help: "Capacity estimates that served no value, by reason (no_data, no_capacity, too_many_targets).",
	}, []string{"reason"})}
	for _, g := range estimateGauges {
		m.gauges = append(m.gauges, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuscale_adapter_capacity_" + g.name, Help: g.help}, labelNames))
	}
	return m
}

// Collectors returns everything to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	out := []prometheus.Collector{m.errors}
	for _, g := range m.gauges {
		out = append(out, g)
	}
	return out
}

func (m *Metrics) set(k Key, e Estimate) {
	if m == nil {
		return
	}
	for i, g := range estimateGauges {
		m.gauges[i].WithLabelValues(k.Namespace, k.Target).Set(g.read(e))
	}
}

func (m *Metrics) failed(err error) {
	if m == nil {
		return
	}
	reason := "no_data"
	switch {
	case errors.Is(err, ErrNoCapacity):
		reason = "no_capacity"
	case errors.Is(err, ErrTooManyTargets):
		reason = "too_many_targets"
	}
	m.errors.WithLabelValues(reason).Inc()
}

func (m *Metrics) forget(k Key) {
	if m == nil {
		return
	}
	for _, g := range m.gauges {
		g.DeleteLabelValues(k.Namespace, k.Target)
	}
}
