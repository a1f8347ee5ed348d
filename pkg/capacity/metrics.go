package capacity

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics exports every part of the last estimate of each workload and
// model, so that a scaling decision can be read back (docs/autoscaling.md
// plots them beside the replicas). Series are removed with the state they
// describe.
type Metrics struct {
	utilization, demand, forecast, trend, trendErr  *prometheus.GaugeVec
	slots, perReplica, horizon, replicas, reporting *prometheus.GaugeVec
	loading, loadingCredit, needed                  *prometheus.GaugeVec
	kvNeeded, prefillNeeded, prefillBusy            *prometheus.GaugeVec
	prefillMaxBusy, prefillOver                     *prometheus.GaugeVec
	dispersion, kvDispersion, lateBudget            *prometheus.GaugeVec
	residence, slack, measuredTTFT, correction      *prometheus.GaugeVec
	itlNeeded, itlQuantile, itlSlots                *prometheus.GaugeVec
	errors                                          *prometheus.CounterVec
	all                                             []*prometheus.GaugeVec
}

// Labels of the per-target series: the namespace, and the target as
// "deployment/<name>", "statefulset/<name>" or "model/<name>".
var labelNames = []string{"namespace", "target"}

// NewMetrics returns the collectors; register them with Collectors.
func NewMetrics() *Metrics {
	g := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuscale_adapter_capacity_" + name, Help: help}, labelNames)
	}
	m := &Metrics{
		utilization:    g("utilization", "Last inference_capacity_utilization served: forecast demand over what the Ready replicas serve within the objective."),
		demand:         g("demand_requests", "Requests running or waiting in the Ready replicas at the last estimate."),
		forecast:       g("forecast_requests", "Peak requests expected over the start-up horizon (Holt's damped trend)."),
		trend:          g("trend_requests_per_second", "The part of Holt's smoothed trend of the demand that exceeds two standard errors: what the forecast projects."),
		trendErr:       g("trend_stderr_requests_per_second", "Standard error of Holt's smoothed trend of the demand."),
		slots:          g("slots_per_replica", "Requests of the current mix one replica's KV cache holds."),
		perReplica:     g("per_replica_requests", "Requests of the current mix one replica carries with at most the late budget's share finding too little KV free (MaxKVLoad)."),
		horizon:        g("horizon_seconds", "Start-up horizon: median measured creation-to-Ready time of the workload's pods."),
		replicas:       g("ready_replicas", "Ready replicas at the last estimate."),
		reporting:      g("reporting_replicas", "Ready replicas with fresh values at the last estimate; the demand of the others is their mean."),
		loading:        g("loading_replicas", "Replicas still loading at the last estimate."),
		loadingCredit:  g("loading_credit_requests", "Requests the loading replicas will serve once Ready."),
		needed:         g("replicas_needed", "The larger of the KV-cache and prefill terms: the replicas an HPA at target 1 asks for."),
		kvNeeded:       g("kv_replicas_needed", "Forecast demand over per-replica capacity: the replicas the KV caches need."),
		prefillNeeded:  g("prefill_replicas_needed", "Prefill work, grown as the demand is forecast to grow, over the busy fraction one replica's prefill may run at; 0 without a limit."),
		prefillBusy:    g("prefill_busy_replicas", "Replicas' worth of prefill work per second over the window: the sum of the replicas' prefill busy fractions."),
		prefillMaxBusy: g("prefill_max_busy", "Busy fraction one replica's prefill may run at with at most the objective's tail of reachable requests missing it by waiting (G/G/1, Kingman); 0 when unreachable or unmeasured."),
		dispersion:     g("arrival_dispersion", "Index of dispersion across the Ready replicas of the requests each took between estimates (1: a random router; less: round-robin)."),
		kvDispersion:   g("kv_dispersion", "Index of dispersion across the Ready replicas of the share of their KV cache in use."),
		lateBudget:     g("kv_late_budget_ratio", "Share of requests the KV term lets find too little KV free: the objective's tail, widened by the slack."),
		residence:      g("residence_seconds", "A request's time in a replica's batch, by Little's law over the window (servers' clock)."),
		slack:          g("slack_seconds", "Time a request of the window's mean prefill may wait within the objective."),
		measuredTTFT:   g("measured_ttft_seconds", "The objective's quantile of the time to first token the servers measured over the window; 0 with too few requests."),
		correction:     g("loop_correction", "The closed loop's factor on the model's replicas (1: none), within [1/2, 2]; time constant one start-up horizon up, two down."),
		prefillOver:    g("prefill_over_objective_ratio", "Share of the window's requests whose prefill alone exceeded the TTFT objective."),
		itlNeeded:      g("itl_replicas_needed", "Sequences decoding, grown as the demand is forecast to grow, over what one replica decodes within the ITL objective; 0 without an ITL objective."),
		itlQuantile:    g("itl_quantile_seconds", "The window's inter-token latency at the objective's quantile; 0 without an ITL objective or enough tokens."),
		itlSlots:       g("itl_slots_per_replica", "Sequences one replica decodes with its ITL quantile within the ITL objective."),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscale_adapter_capacity_estimate_errors_total",
			Help: "Capacity estimates that served no value, by reason (no_data, no_capacity, too_many_targets).",
		}, []string{"reason"}),
	}
	m.all = []*prometheus.GaugeVec{m.utilization, m.demand, m.forecast, m.trend, m.trendErr, m.slots, m.perReplica, m.horizon, m.replicas, m.reporting, m.loading, m.loadingCredit, m.needed,
		m.kvNeeded, m.prefillNeeded, m.prefillBusy, m.prefillMaxBusy, m.prefillOver,
		m.dispersion, m.kvDispersion, m.lateBudget, m.residence, m.slack, m.measuredTTFT, m.correction, m.itlNeeded, m.itlQuantile, m.itlSlots}
	return m
}

// Collectors returns everything to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	out := []prometheus.Collector{m.errors}
	for _, g := range m.all {
		out = append(out, g)
	}
	return out
}

func (m *Metrics) set(k Key, e Estimate) {
	if m == nil {
		return
	}
	l := prometheus.Labels{"namespace": k.Namespace, "target": k.Target}
	m.utilization.With(l).Set(e.Utilization)
	m.demand.With(l).Set(e.Demand)
	m.forecast.With(l).Set(e.Forecast)
	m.trend.With(l).Set(e.Trend)
	m.trendErr.With(l).Set(e.TrendStdErr)
	m.slots.With(l).Set(e.Slots)
	m.perReplica.With(l).Set(e.PerReplica)
	m.horizon.With(l).Set(e.Horizon.Seconds())
	m.replicas.With(l).Set(float64(e.Replicas))
	m.reporting.With(l).Set(float64(e.Reporting))
	m.loading.With(l).Set(float64(e.Loading))
	m.loadingCredit.With(l).Set(e.LoadingCredit)
	m.needed.With(l).Set(e.Needed)
	m.kvNeeded.With(l).Set(e.KVNeeded)
	m.prefillNeeded.With(l).Set(e.PrefillNeeded)
	m.prefillBusy.With(l).Set(e.PrefillBusy)
	m.prefillMaxBusy.With(l).Set(e.Prefill.MaxBusy)
	m.prefillOver.With(l).Set(e.Prefill.OverObjective)
	m.dispersion.With(l).Set(e.Dispersion)
	m.kvDispersion.With(l).Set(e.KVDispersion)
	m.lateBudget.With(l).Set(e.LateBudget)
	m.residence.With(l).Set(e.Residence)
	m.slack.With(l).Set(e.Slack)
	m.measuredTTFT.With(l).Set(e.MeasuredTTFT)
	m.correction.With(l).Set(e.Correction)
	m.itlNeeded.With(l).Set(e.ITLNeeded)
	m.itlQuantile.With(l).Set(e.ITL.Quantile)
	m.itlSlots.With(l).Set(e.ITL.Slots)
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
	for _, g := range m.all {
		g.DeleteLabelValues(k.Namespace, k.Target)
	}
}
