package provider

import (
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpuscale/gpuscale/pkg/signal"
)

// Served metric names. They are part of gpuscale's API: HPAs name them.
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

// aggregation says how a workload's pods combine.
type aggregation uint8

const (
	mean aggregation = iota
	sum
)

// metricDef describes one served metric.
type metricDef struct {
	name     string
	signal   signal.Signal // scalar metrics
	source   signal.Source
	quantile float64 // > 0 for latency quantiles, computed from histograms
	hist     signal.Hist
	agg      aggregation
	format   resource.Format
}

func (d metricDef) isQuantile() bool { return d.quantile > 0 }

var podMetrics = []metricDef{
	{name: GPUUtilization, signal: signal.GPUUtilization, source: signal.SourceGPU, agg: mean, format: resource.DecimalSI},
	{name: GPUMemoryUtilization, signal: signal.GPUMemoryUtilization, source: signal.SourceGPU, agg: mean, format: resource.DecimalSI},
	{name: GPUMemoryUsedBytes, signal: signal.GPUMemoryUsedBytes, source: signal.SourceGPU, agg: sum, format: resource.BinarySI},
	{name: GPUPowerWatts, signal: signal.GPUPowerWatts, source: signal.SourceGPU, agg: sum, format: resource.DecimalSI},
	{name: QueueDepth, signal: signal.QueueDepth, source: signal.SourceInference, agg: sum, format: resource.DecimalSI},
	{name: RequestsRunning, signal: signal.RequestsRunning, source: signal.SourceInference, agg: sum, format: resource.DecimalSI},
	{name: KVCacheUtilization, signal: signal.KVCacheUtilization, source: signal.SourceInference, agg: mean, format: resource.DecimalSI},
	{name: GPUSMActive, signal: signal.GPUSMActive, source: signal.SourceGPU, agg: mean, format: resource.DecimalSI},
	{name: GPUTensorActive, signal: signal.GPUTensorActive, source: signal.SourceGPU, agg: mean, format: resource.DecimalSI},
	{name: TTFTP50, source: signal.SourceInference, quantile: 0.5, format: resource.DecimalSI},
	{name: TTFTP90, source: signal.SourceInference, quantile: 0.9, format: resource.DecimalSI},
	{name: TTFTP99, source: signal.SourceInference, quantile: 0.99, format: resource.DecimalSI},
	{name: ITLP50, source: signal.SourceInference, quantile: 0.5, hist: signal.HistITL, format: resource.DecimalSI},
	{name: ITLP90, source: signal.SourceInference, quantile: 0.9, hist: signal.HistITL, format: resource.DecimalSI},
	{name: ITLP99, source: signal.SourceInference, quantile: 0.99, hist: signal.HistITL, format: resource.DecimalSI},
}

var podMetricsByName = func() map[string]metricDef {
	m := map[string]metricDef{}
	for _, d := range podMetrics {
		m[d.name] = d
	}
	return m
}()

// nodeMetrics are served for nodes, from the exporter's whole-node view.
var nodeMetrics = map[string]bool{GPUUtilization: true, GPUMemoryUtilization: true,
	GPUSMActive: true, GPUTensorActive: true}

// externalMetrics are served per model through external.metrics.k8s.io.
var externalMetrics = map[string]bool{QueueDepth: true, TTFTP90: true, ITLP90: true}

// ModelLabel is the external metrics' label that selects a model.
const ModelLabel = "model_name"

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
