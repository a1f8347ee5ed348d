package provider

import (
	"context"
	"math"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/metrics/pkg/apis/external_metrics"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/gpuscale/gpuscale/pkg/histogram"
	"github.com/gpuscale/gpuscale/pkg/store"
)

var externalResource = schema.GroupResource{Group: "external.metrics.k8s.io", Resource: "namespaces"}

// GetExternalMetric implements cmprovider.ExternalMetricsProvider: one
// value per model served in the namespace, selected by the model_name
// label, so a model served by several workloads scales as one queue.
func (p *Provider) GetExternalMetric(ctx context.Context, namespace string, metricSelector labels.Selector, info cmprovider.ExternalMetricInfo) (*external_metrics.ExternalMetricValueList, error) {
	list, err := p.externalMetric(namespace, metricSelector, info.Metric)
	p.cfg.Observer.Observe("external", info.Metric, "namespaces", result(err))
	return list, err
}

type modelAgg struct {
	sum    float64
	n      int
	incs   []*histogram.Histogram
	newest time.Time
}

func (p *Provider) externalMetric(namespace string, sel labels.Selector, metric string) (*external_metrics.ExternalMetricValueList, error) {
	if !externalMetrics[metric] {
		return nil, cmprovider.NewMetricNotFoundError(externalResource, metric)
	}
	def := podMetricsByName[metric]
	pods, err := p.cfg.Pods.Pods(namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	now := p.cfg.Now()
	byModel := map[string]*modelAgg{}
	for _, pod := range pods {
		if !podReady(pod) {
			continue
		}
		key := store.Key{Namespace: pod.Namespace, Name: pod.Name}
		smp, ok := p.cfg.Store.Latest(key, store.SourceInference, now, p.cfg.MaxStaleness)
		if !ok || smp.Model == "" || !modelMatches(sel, smp) {
			continue
		}
		a := byModel[smp.Model]
		if a == nil {
			a = &modelAgg{}
			byModel[smp.Model] = a
		}
		if def.isTTFT() {
			if inc, ok := p.ttftIncrease(key, now); ok {
				a.incs = append(a.incs, inc)
				a.newest = later(a.newest, smp.Time)
			}
		} else if v, ok := smp.Get(def.signal); ok {
			a.sum += v
			a.n++
			a.newest = later(a.newest, smp.Time)
		}
	}
	models := make([]string, 0, len(byModel))
	for m := range byModel {
		models = append(models, m)
	}
	sort.Strings(models)
	var items []external_metrics.ExternalMetricValue
	for _, m := range models {
		a := byModel[m]
		v, ok := a.sum, a.n > 0
		if def.isTTFT() {
			v, ok = quantileOf(def.quantile, a.incs)
		}
		if !ok {
			continue
		}
		items = append(items, external_metrics.ExternalMetricValue{
			MetricName:   metric,
			MetricLabels: map[string]string{ModelLabel: m},
			Timestamp:    metav1.NewTime(a.newest),
			Value:        quantity(v, def.format),
		})
	}
	if len(items) == 0 {
		return nil, cmprovider.NewMetricNotFoundForSelectorError(externalResource, metric, namespace, sel)
	}
	return &external_metrics.ExternalMetricValueList{Items: items}, nil
}

func quantileOf(q float64, incs []*histogram.Histogram) (float64, bool) {
	if len(incs) == 0 {
		return 0, false
	}
	merged, err := histogram.Merge(incs...)
	if err != nil {
		return 0, false
	}
	v := histogram.Quantile(q, merged)
	return v, !math.IsNaN(v) && !math.IsInf(v, 0)
}

// ListAllExternalMetrics implements cmprovider.ExternalMetricsProvider.
func (p *Provider) ListAllExternalMetrics() []cmprovider.ExternalMetricInfo {
	out := make([]cmprovider.ExternalMetricInfo, 0, len(externalMetrics))
	for _, d := range podMetrics {
		if externalMetrics[d.name] {
			out = append(out, cmprovider.ExternalMetricInfo{Metric: d.name})
		}
	}
	return out
}

// ListAllMetrics implements cmprovider.CustomMetricsProvider: every metric
// on every resource it is served for.
func (p *Provider) ListAllMetrics() []cmprovider.CustomMetricInfo {
	var out []cmprovider.CustomMetricInfo
	for _, d := range podMetrics {
		for _, gr := range []schema.GroupResource{podsResource, deploymentsResource, statefulsetsResource} {
			out = append(out, cmprovider.CustomMetricInfo{GroupResource: gr, Namespaced: true, Metric: d.name})
		}
		out = append(out, cmprovider.CustomMetricInfo{GroupResource: namespacesResource, Namespaced: false, Metric: d.name})
		if nodeMetrics[d.name] {
			out = append(out, cmprovider.CustomMetricInfo{GroupResource: nodesResource, Namespaced: false, Metric: d.name})
		}
	}
	return out
}
