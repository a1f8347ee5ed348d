package provider

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/pkg/signal"
)

// Values answers metric values in batches: one API request is one call, so
// a source that asks a remote system (Prometheus) asks once, not once per
// pod. The provider owns the rules both sources share: it passes only
// Ready pods, and turns an empty answer into NotFound.
type Values interface {
	// Pods returns the value of each pod of the set, aligned with
	// pods.Pods: out[i] is the value of pods.Pods[i], or the zero Value
	// (see Value.Valid) when it has none. A slice rather than a map by
	// name: the HPA's list call asks about thousands of pods, and a
	// per-call map of that size was a sixth of its cost.
	Pods(ctx context.Context, pods *PodSet, m Metric, sel labels.Selector) ([]Value, error)
	// Workload returns one value for the pods together, aggregated per
	// the metric's rule (Metric.Sum, latency quantiles from merged
	// histograms); false
	// when none of them has a value.
	Workload(ctx context.Context, namespace string, pods []*corev1.Pod, m Metric, sel labels.Selector) (Value, bool, error)
	// Nodes returns the value of each node that has one, by node name.
	Nodes(ctx context.Context, nodes []string, m Metric) (map[string]Value, error)
	// Models returns, by model name, the value of the pods serving each
	// model selected by sel (a selector on ModelLabel).
	Models(ctx context.Context, namespace string, pods []*corev1.Pod, m Metric, sel labels.Selector) (map[string]Value, error)
}

// Metric is a served metric as a Values implementation sees it.
type Metric struct {
	// Name is the served name, one of the constants of this package.
	Name string
	// Quantile is the latency quantile (of TTFT or ITL, per Hist); 0 for
	// scalar metrics.
	Quantile float64
	// Hist is the latency histogram a quantile is of.
	Hist signal.Hist
	// Sum says a workload's pods add up; otherwise their mean is taken.
	Sum bool
	// Signal and Source say where the embedded store keeps a scalar
	// metric's samples; a source other than the store ignores them.
	Signal signal.Signal
	Source signal.Source
}

// IsQuantile reports whether the metric is a quantile of a latency
// histogram (TTFT or ITL, per Hist), computed from the histograms' increase
// over the latency window.
func (m Metric) IsQuantile() bool { return m.Quantile > 0 }

// Value is one computed metric value and the time it describes. Every
// value has that time, so the zero Value stands for no value.
type Value struct {
	V    float64
	Time time.Time
}

// Valid reports whether v is a value rather than the zero Value.
func (v Value) Valid() bool { return !v.Time.IsZero() }

func (d metricDef) metric() Metric {
	return Metric{Name: d.name, Quantile: d.quantile, Hist: d.hist, Sum: d.agg == sum, Signal: d.signal, Source: d.source}
}

// MetricByName describes a served metric, false if the name is unknown.
func MetricByName(name string) (Metric, bool) {
	d, ok := podMetricsByName[name]
	return d.metric(), ok
}

// Metrics lists every served metric.
func Metrics() []Metric {
	out := make([]Metric, len(podMetrics))
	for i, d := range podMetrics {
		out[i] = d.metric()
	}
	return out
}

// readyPods keeps the pods that may have a value: a loading model reports
// an idle queue that would drag an average down.
func readyPods(pods []*corev1.Pod) []*corev1.Pod {
	out := make([]*corev1.Pod, 0, len(pods))
	for _, p := range pods {
		if podReady(p) {
			out = append(out, p)
		}
	}
	return out
}
