package provider

import (
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpuscale/gpuscale/pkg/signal"
)

// Served metric names. They are part of gpuscale's API: HPAs name them.
// The catalog (podMetrics) takes them from pkg/signal's tables; these are
// the names code and tests refer to, and TestServedNamesInCatalog checks
// each is served.
const (
	GPUUtilization       = "gpu_utilization"
	GPUMemoryUtilization = "gpu_memory_utilization"
	GPUMemoryUsedBytes   = "gpu_memory_used_bytes"
	GPUPowerWatts        = "gpu_power_watts"
	QueueDepth           = "inference_queue_depth"
	RequestsRunning      = "inference_requests_running"
	KVCacheUtilization   = "inference_kv_cache_utilization"
	TTFTP50              = "inference_ttft_seconds_p50"
	TTFTP90              = "inference_ttft_seconds_p90"
	TTFTP99              = "inference_ttft_seconds_p99"
	// Inter-token latency (time per output token) quantiles.
	ITLP50 = "inference_itl_seconds_p50"
	ITLP90 = "inference_itl_seconds_p90"
	ITLP99 = "inference_itl_seconds_p99"
	// GPU profiling signals (DCGM_FI_PROF_SM_ACTIVE, _PIPE_TENSOR_ACTIVE),
	// in percent; only GPUs with profiling (Hopper and later) have them.
	GPUSMActive     = "gpu_sm_active"
	GPUTensorActive = "gpu_tensor_active"
)

// metricDef describes one served metric.
type metricDef struct {
	name     string
	signal   signal.Signal // scalar metrics
	source   signal.Source
	quantile float64 // > 0 for latency quantiles, computed from histograms
	hist     signal.Hist
	agg      signal.Aggregation // how a workload's pods combine
	format   resource.Format
}

func (d metricDef) isQuantile() bool { return d.quantile > 0 }

// podMetrics is the catalog, in pkg/signal's order: an entry per scalar
// signal, then each latency histogram's served quantiles. Everything in it
// comes from pkg/signal's tables, so that a new signal is a line there, not
// also one here; TestEverySignalServed walks them.
var podMetrics = func() []metricDef {
	var out []metricDef
	for sig := range signal.NumSignals {
		out = append(out, metricDef{name: sig.Served(), signal: sig, source: sig.Source(), agg: sig.Aggregation(), format: formatOf(sig.Unit())})
	}
	for h := range signal.NumHists {
		for _, q := range h.Quantiles() {
			out = append(out, metricDef{name: q.Served, source: h.Source(), quantile: q.Q, hist: h, format: formatOf(h.Unit())})
		}
	}
	return out
}()

// formatOf is the format a quantity in unit u is served in: bytes in
// binary SI (Ki, Mi, Gi), the rest in decimal.
func formatOf(u signal.Unit) resource.Format {
	if u == signal.Bytes {
		return resource.BinarySI
	}
	return resource.DecimalSI
}

var podMetricsByName = func() map[string]metricDef {
	m := map[string]metricDef{}
	for _, d := range podMetrics {
		m[d.name] = d
	}
	return m
}()

// nodeMetrics are served for nodes, from the exporter's whole-node view:
// the GPU signals that are means (utilizations, activities). A sum over a
// node's GPUs (memory used, power) is no load signal an HPA scales on, and
// the PromQL defaults have node queries for the means only.
var nodeMetrics = func() map[string]bool {
	m := map[string]bool{}
	for sig := range signal.NumSignals {
		if sig.Source() == signal.SourceGPU && sig.Aggregation() == signal.Mean {
			m[sig.Served()] = true
		}
	}
	return m
}()

// externalMetrics are served per model through external.metrics.k8s.io.
var externalMetrics = map[string]bool{QueueDepth: true, TTFTP90: true, ITLP90: true}

// ModelLabel is the external metrics' label that selects a model.
const ModelLabel = "model_name"

// ModelLabelValue is model as a metric selector sees it: its name with
// every character a label value cannot hold (anything but ASCII letters,
// digits, '-', '_' and '.') replaced by '_'. A Hugging Face name's '/' is
// not valid in a label selector, which the HPA controller and the API
// server parse and check, so meta-llama/Llama-3.1-8B-Instruct is selected
// as meta-llama_Llama-3.1-8B-Instruct; a valid name is itself.
func ModelLabelValue(model string) string {
	if !strings.ContainsFunc(model, notInLabelValue) {
		return model
	}
	return strings.Map(func(r rune) rune {
		if notInLabelValue(r) {
			return '_'
		}
		return r
	}, model)
}

// notInLabelValue reports whether r cannot be in a label value.
func notInLabelValue(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
}

// Resources the custom metrics API serves.
var (
	podsResource         = schema.GroupResource{Resource: "pods"}
	nodesResource        = schema.GroupResource{Resource: "nodes"}
	namespacesResource   = schema.GroupResource{Resource: "namespaces"}
	deploymentsResource  = schema.GroupResource{Group: "apps", Resource: "deployments"}
	statefulsetsResource = schema.GroupResource{Group: "apps", Resource: "statefulsets"}
)

// kindOf normalises the resource of a request: clients may omit the group
// of apps resources or use singular names.
func kindOf(gr schema.GroupResource) (schema.GroupResource, bool) {
	switch gr.Resource {
	case "pods", "pod":
		return podsResource, gr.Group == ""
	case "nodes", "node":
		return nodesResource, gr.Group == ""
	case "namespaces", "namespace":
		return namespacesResource, gr.Group == ""
	case "deployments", "deployment":
		return deploymentsResource, gr.Group == "" || gr.Group == "apps"
	case "statefulsets", "statefulset":
		return statefulsetsResource, gr.Group == "" || gr.Group == "apps"
	}
	return gr, false
}
