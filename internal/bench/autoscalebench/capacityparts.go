package autoscalebench

import (
	"bytes"
	"context"
	"fmt"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpuscale/gpuscale/internal/harness/devenv"
)

// CapacityParts is the adapter's last capacity estimate of one workload,
// read from its gpuscale_adapter_capacity_* gauges (pkg/signal/capacity): what
// the capacity policy's HPA was told, and why.
type CapacityParts struct {
	At time.Duration // trace time
	// Demand and Forecast are requests (running + waiting now, and the
	// most expected over the horizon); Trend the trend the forecast
	// projects and TrendStdErr its noise, per second.
	Demand, Forecast, Trend, TrendStdErr float64
	// Slots is what one replica's KV cache holds; PerReplica what it
	// serves within the objective.
	Slots, PerReplica float64
	// HorizonSeconds is the measured start-up horizon. The adapter runs
	// on the wall clock, so it and the trend's seconds are wall seconds:
	// multiply by the recording's Speedup for trace time.
	HorizonSeconds float64
	// Ready, Reporting (Ready with fresh data) and Loading replicas;
	// LoadingCredit the requests the loading ones will serve; Needed the
	// replicas asked for.
	Ready, Reporting, Loading, LoadingCredit, Needed, Utilization float64
	// KVNeeded and PrefillNeeded are the two terms Needed is the larger
	// of; PrefillBusy the replicas' worth of prefill work, PrefillMaxBusy
	// how busy one replica's prefill may run, PrefillOver the share of
	// prefills over the objective alone, PrefillObjective (seconds) the
	// time to first token the prefill term is held to.
	KVNeeded, PrefillNeeded, PrefillBusy, PrefillMaxBusy, PrefillOver, PrefillObjective float64
	// PrefillBacklog is the queue's prefill work over the horizon, in
	// replicas' worth.
	PrefillBacklog float64
	// Dispersion and KVDispersion are the measured spreads of the
	// replicas' arrivals and KV in use; LateBudget the share of requests
	// the KV term lets wait; Residence and Slack (servers' seconds) what
	// it is worked out from; MeasuredTTFT the window's TTFT quantile (0:
	// too few) and Correction the closed loop's factor.
	Dispersion, KVDispersion, LateBudget, Residence, Slack, MeasuredTTFT, Correction float64
	// ITLNeeded is the inter-token-latency term (0 without an ITL
	// objective), ITLQuantile the window's ITL at the objective's quantile
	// and ITLSlots the sequences one replica decodes within it.
	ITLNeeded, ITLQuantile, ITLSlots float64
}

// capacityGauges maps each gpuscale_adapter_capacity_* gauge to its field.
var capacityGauges = map[string]func(*CapacityParts) *float64{
	"gpuscale_adapter_capacity_demand_requests":                  func(c *CapacityParts) *float64 { return &c.Demand },
	"gpuscale_adapter_capacity_forecast_requests":                func(c *CapacityParts) *float64 { return &c.Forecast },
	"gpuscale_adapter_capacity_trend_requests_per_second":        func(c *CapacityParts) *float64 { return &c.Trend },
	"gpuscale_adapter_capacity_trend_stderr_requests_per_second": func(c *CapacityParts) *float64 { return &c.TrendStdErr },
	"gpuscale_adapter_capacity_slots_per_replica":                func(c *CapacityParts) *float64 { return &c.Slots },
	"gpuscale_adapter_capacity_per_replica_requests":             func(c *CapacityParts) *float64 { return &c.PerReplica },
	"gpuscale_adapter_capacity_horizon_seconds":                  func(c *CapacityParts) *float64 { return &c.HorizonSeconds },
	"gpuscale_adapter_capacity_ready_replicas":                   func(c *CapacityParts) *float64 { return &c.Ready },
	"gpuscale_adapter_capacity_reporting_replicas":               func(c *CapacityParts) *float64 { return &c.Reporting },
	"gpuscale_adapter_capacity_loading_replicas":                 func(c *CapacityParts) *float64 { return &c.Loading },
	"gpuscale_adapter_capacity_loading_credit_requests":          func(c *CapacityParts) *float64 { return &c.LoadingCredit },
	"gpuscale_adapter_capacity_replicas_needed":                  func(c *CapacityParts) *float64 { return &c.Needed },
	"gpuscale_adapter_capacity_utilization":                      func(c *CapacityParts) *float64 { return &c.Utilization },
	"gpuscale_adapter_capacity_kv_replicas_needed":               func(c *CapacityParts) *float64 { return &c.KVNeeded },
	"gpuscale_adapter_capacity_prefill_replicas_needed":          func(c *CapacityParts) *float64 { return &c.PrefillNeeded },
	"gpuscale_adapter_capacity_prefill_busy_replicas":            func(c *CapacityParts) *float64 { return &c.PrefillBusy },
	"gpuscale_adapter_capacity_prefill_backlog_replicas":         func(c *CapacityParts) *float64 { return &c.PrefillBacklog },
	"gpuscale_adapter_capacity_prefill_max_busy":                 func(c *CapacityParts) *float64 { return &c.PrefillMaxBusy },
	"gpuscale_adapter_capacity_prefill_over_objective_ratio":     func(c *CapacityParts) *float64 { return &c.PrefillOver },
	"gpuscale_adapter_capacity_prefill_objective_seconds":        func(c *CapacityParts) *float64 { return &c.PrefillObjective },
	"gpuscale_adapter_capacity_arrival_dispersion":               func(c *CapacityParts) *float64 { return &c.Dispersion },
	"gpuscale_adapter_capacity_kv_dispersion":                    func(c *CapacityParts) *float64 { return &c.KVDispersion },
	"gpuscale_adapter_capacity_kv_late_budget_ratio":             func(c *CapacityParts) *float64 { return &c.LateBudget },
	"gpuscale_adapter_capacity_residence_seconds":                func(c *CapacityParts) *float64 { return &c.Residence },
	"gpuscale_adapter_capacity_slack_seconds":                    func(c *CapacityParts) *float64 { return &c.Slack },
	"gpuscale_adapter_capacity_measured_ttft_seconds":            func(c *CapacityParts) *float64 { return &c.MeasuredTTFT },
	"gpuscale_adapter_capacity_loop_correction":                  func(c *CapacityParts) *float64 { return &c.Correction },
	"gpuscale_adapter_capacity_itl_replicas_needed":              func(c *CapacityParts) *float64 { return &c.ITLNeeded },
	"gpuscale_adapter_capacity_itl_quantile_seconds":             func(c *CapacityParts) *float64 { return &c.ITLQuantile },
	"gpuscale_adapter_capacity_itl_slots_per_replica":            func(c *CapacityParts) *float64 { return &c.ITLSlots },
}

// parseCapacityParts reads the capacity gauges of one workload from the
// adapter's /metrics text; ok is false when the adapter has no estimate
// of it yet.
func parseCapacityParts(body []byte, namespace, target string) (parts CapacityParts, ok bool, err error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return CapacityParts{}, false, fmt.Errorf("autoscalebench: adapter /metrics: %w", err)
	}
	for name, field := range capacityGauges {
		for _, m := range fams[name].GetMetric() {
			if label(m, "namespace") == namespace && label(m, "target") == target {
				*field(&parts) = m.GetGauge().GetValue()
				ok = true
			}
		}
	}
	return parts, ok, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// capacitySampleEvery is how often, in trace time, the capacity policy's
// estimate is read back: the HPA's sync period, when it changes.
const capacitySampleEvery = 15 * time.Second

// sampleCapacity records the adapter's capacity estimate of r's workload
// every capacitySampleEvery of trace time until ctx is done.
func sampleCapacity(ctx context.Context, env *devenv.Env, p *Plan, r *policyRun, clock *Clock, start time.Time) {
	t := time.NewTicker(p.wall(capacitySampleEvery))
	defer t.Stop()
	for {
		at := clock.Now().Sub(start)
		body, err := env.AdapterGet(ctx, "/metrics")
		if err == nil {
			var parts CapacityParts
			var ok bool
			parts, ok, err = parseCapacityParts(body, r.namespace, "deployment/"+workloadName)
			if ok {
				parts.At = at
				r.mu.Lock()
				r.capacity = append(r.capacity, parts)
				r.mu.Unlock()
			}
		}
		if err != nil && ctx.Err() == nil {
			p.Log.Warn("cannot read the adapter's capacity estimate", "policy", r.policy, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
