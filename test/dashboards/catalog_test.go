package dashboards

import (
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuscale/gpuscale/pkg/gpu/dcgm"
	"github.com/gpuscale/gpuscale/pkg/metrics"
)

type kind int

const (
	gauge kind = iota
	counter
	histogram
)

// ownMetric is one of gpuscale's own series beyond the exporter's GPU
// fields, with the package that defines it: TestOwnMetricsDefined finds
// each name among that package's string literals, so a rename there breaks
// this list and, through it, every dashboard and rule that uses the old name.
type ownMetric struct {
	name string
	kind kind
	pkg  string
}

var ownMetrics = []ownMetric{
	{"gpuscale_exporter_collection_duration_seconds", histogram, "pkg/exporter"},
	{"gpuscale_exporter_collection_errors_total", counter, "pkg/exporter"},
	{"gpuscale_exporter_last_collection_success_timestamp_seconds", gauge, "pkg/exporter"},
	{"gpuscale_exporter_devices", gauge, "pkg/exporter"},
	{"gpuscale_exporter_devices_unhealthy", gauge, "pkg/exporter"},
	{"gpuscale_exporter_info", gauge, "pkg/exporter"},
	{"gpuscale_exporter_field_errors_total", counter, "pkg/exporter"},

	{"gpuscale_adapter_metric_requests_total", counter, "pkg/provider"},
	{"gpuscale_adapter_metric_fresh_pods", gauge, "pkg/adapter/storesource"},
	{"gpuscale_adapter_metric_newest_sample_age_seconds", gauge, "pkg/adapter/storesource"},
	{"gpuscale_adapter_scrape_errors_total", counter, "pkg/adapter/gather"},
	{"gpuscale_adapter_rejected_values_total", counter, "pkg/adapter/gather"},
	{"gpuscale_adapter_scrape_last_success_timestamp_seconds", gauge, "pkg/adapter/gather"},
	{"gpuscale_adapter_scrape_duration_seconds", histogram, "pkg/adapter/gather"},
	{"gpuscale_adapter_targets", gauge, "pkg/adapter/gather"},
	{"gpuscale_adapter_inference_scrapes_total", counter, "pkg/adapter/gather"},
	{"gpuscale_adapter_scrape_cycle_duration_seconds", histogram, "pkg/adapter/gather"},
	{"gpuscale_adapter_misconfigured_targets", gauge, "pkg/adapter/gather"},
	{"gpuscale_adapter_gpu_attributions_rejected_total", counter, "pkg/adapter/gather"},

	{"gpuscale_scaledown_node_gpu_utilization", gauge, "pkg/scaledown"},
	{"gpuscale_scaledown_node_gpu_pods", gauge, "pkg/scaledown"},
	{"gpuscale_scaledown_node_below_threshold", gauge, "pkg/scaledown"},
	{"gpuscale_scaledown_node_blocked", gauge, "pkg/scaledown"},
	{"gpuscale_scaledown_node_unneeded_seconds", gauge, "pkg/scaledown"},
	{"gpuscale_scaledown_node_removal_candidate", gauge, "pkg/scaledown"},
	{"gpuscale_scaledown_managed_pods", gauge, "pkg/scaledown"},
	{"gpuscale_scaledown_protected_pods", gauge, "pkg/scaledown"},
	{"gpuscale_scaledown_leader", gauge, "pkg/scaledown"},
	{"gpuscale_scaledown_last_reconcile_timestamp_seconds", gauge, "pkg/scaledown"},
	{"gpuscale_scaledown_patches_total", counter, "pkg/scaledown"},
	{"gpuscale_scaledown_patch_rate_limited_total", counter, "pkg/scaledown"},
	{"gpuscale_scaledown_load_errors_total", counter, "pkg/scaledown"},
}

// inferenceMetrics are the inference servers' own names the dashboards use.
// gpuscale does not define them, but it reads them (pkg/adapter/inference) or
// simulates them (pkg/inferencesim): TestInferenceMetricsKnown finds each
// there, so the dashboards stay on the names gpuscale is tested against.
var inferenceMetrics = map[string]kind{
	"vllm:num_requests_waiting":                gauge,
	"vllm:num_requests_running":                gauge,
	"vllm:kv_cache_usage_perc":                 gauge,
	"vllm:gpu_cache_usage_perc":                gauge, // vLLM before v0.10
	"vllm:time_to_first_token_seconds":         histogram,
	"vllm:generation_tokens_total":             counter,
	"vllm:request_success_total":               counter,
	"sglang:num_queue_reqs":                    gauge,
	"sglang:num_running_reqs":                  gauge,
	"sglang:token_usage":                       gauge,
	"sglang:time_to_first_token_seconds":       histogram,
	"sglang:generation_tokens_total":           counter,
	"nv_inference_pending_request_count":       gauge,
	"tgi_queue_size":                           gauge,
	"tgi_batch_current_size":                   gauge,
	"nv_inference_first_response_histogram_ms": histogram,
}

// kubeStateMetrics are kube-state-metrics (v2.x) names for HPAs, as its
// docs list them (docs/metrics/workload/horizontalpodautoscaler-metrics.md).
// They are standard, not gpuscale's, and cannot be checked against source.
var kubeStateMetrics = map[string]kind{
	"kube_horizontalpodautoscaler_info":                    gauge,
	"kube_horizontalpodautoscaler_spec_max_replicas":       gauge,
	"kube_horizontalpodautoscaler_spec_min_replicas":       gauge,
	"kube_horizontalpodautoscaler_spec_target_metric":      gauge,
	"kube_horizontalpodautoscaler_status_target_metric":    gauge,
	"kube_horizontalpodautoscaler_status_condition":        gauge,
	"kube_horizontalpodautoscaler_status_current_replicas": gauge,
	"kube_horizontalpodautoscaler_status_desired_replicas": gauge,
}

// catalog maps every name a query may use to its kind.
// platformMetrics are not gpuscale's: the alert rules use them where only
// the platform can see the failure (a target that does not answer, an
// APIService the aggregator cannot reach, a DaemonSet pod that is not
// running). aggregator_unavailable_apiservice is checked against a real
// kube-apiserver's /metrics by test/e2e's TestAPIServiceAvailabilityMetric.
var platformMetrics = map[string]kind{
	"up":                                gauge, // Prometheus, for every target
	"aggregator_unavailable_apiservice": gauge, // kube-apiserver
	"kube_daemonset_status_number_unavailable": gauge, // kube-state-metrics v2
}

type catalog map[string]kind

func newCatalog() catalog {
	c := catalog{}
	// Both of dcgm-exporter's naming schemas: the dashboards and rules
	// read either.
	for _, s := range dcgm.Schemas {
		for _, f := range metrics.DCGMFields(s) {
			k := gauge
			if f.Type == dto.MetricType_COUNTER {
				k = counter
			}
			c[f.Name] = k
		}
	}
	c[metrics.XIDErrorsCountName] = gauge
	c[metrics.XIDErrorsTotalName] = counter
	c[metrics.GPUUpName] = gauge
	c[metrics.GPUSharedName] = gauge
	for _, m := range ownMetrics {
		c[m.name] = m.kind
	}
	for n, k := range inferenceMetrics {
		c[n] = k
	}
	for n, k := range kubeStateMetrics {
		c[n] = k
	}
	for n, k := range platformMetrics {
		c[n] = k
	}
	return c
}

// known reports whether a selector's metric name is in the catalog; the
// series of a histogram are its _bucket, _sum and _count.
func (c catalog) known(name string) bool {
	if _, ok := c[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && c[base] == histogram {
			return true
		}
	}
	return false
}

func TestOwnMetricsDefined(t *testing.T) {
	byPkg := map[string]map[string]bool{}
	for _, m := range ownMetrics {
		lits, ok := byPkg[m.pkg]
		if !ok {
			lits = stringLiterals(t, m.pkg)
			byPkg[m.pkg] = lits
		}
		if !lits[m.name] {
			t.Errorf("%s is not defined in %s any more: renamed? update the dashboards, rules and this list", m.name, m.pkg)
		}
	}
}

func TestInferenceMetricsKnown(t *testing.T) {
	// The engines' families are named once, in the dialect table that
	// pkg/adapter/inference reads and pkg/inferencesim serves.
	lits := stringLiterals(t, "pkg/signal/dialect", "pkg/adapter/inference", "pkg/inferencesim")
	var missing []string
	for n := range inferenceMetrics {
		if !lits[n] {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	for _, n := range missing {
		t.Errorf("%s is neither in the dialect table (pkg/signal/dialect) nor read by pkg/adapter/inference nor simulated by pkg/inferencesim: a name gpuscale does not know", n)
	}
}

func TestCatalogHasExporterFields(t *testing.T) {
	c := newCatalog()
	for _, n := range []string{"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS", "gpuscale_gpu_xid_errors_total"} {
		if !c.known(n) {
			t.Errorf("%s missing from the exporter's names", n)
		}
	}
}
