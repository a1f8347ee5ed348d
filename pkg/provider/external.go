package provider

import (
	"context"
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/metrics/pkg/apis/external_metrics"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"
)

var externalResource = schema.GroupResource{Group: "external.metrics.k8s.io", Resource: "namespaces"}

// GetExternalMetric implements cmprovider.ExternalMetricsProvider: one
// value per model served in the namespace, selected by the model_name
// label, so a model served by several workloads scales as one queue.
func (p *Provider) GetExternalMetric(ctx context.Context, namespace string, metricSelector labels.Selector, info cmprovider.ExternalMetricInfo) (*external_metrics.ExternalMetricValueList, error) {
	list, err := p.externalMetric(ctx, namespace, metricSelector, info.Metric)
	err = apiError(err)
	p.cfg.Observer.Observe("external", info.Metric, "namespaces", result(err))
	return list, err
}

func (p *Provider) externalMetric(ctx context.Context, namespace string, sel labels.Selector, metric string) (*external_metrics.ExternalMetricValueList, error) {
	if metric == CapacityUtilization && p.cfg.Capacity != nil {
		return p.capacityModel(ctx, namespace, sel)
	}
	if !externalMetrics[metric] {
		return nil, cmprovider.NewMetricNotFoundError(externalResource, metric)
	}
	def := podMetricsByName[metric]
	pods, err := p.cfg.Pods.Pods(namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var byModel map[string]Value
	ready := readyPods(pods)
	if len(ready) > 0 {
		if byModel, err = p.cfg.Values.Models(ctx, namespace, ready, def.metric(), sel); err != nil {
			return nil, err
		}
	}
	models := make([]string, 0, len(byModel))
	for m := range byModel {
		if m != "" {
			models = append(models, m)
		}
	}
	sort.Strings(models)
	items := make([]external_metrics.ExternalMetricValue, 0, len(models))
	for _, m := range models {
		v := byModel[m]
		// A model's sum over the namespace's ready pods that leaves
		// what they can add up to, or what a quantity holds, fails the
		// request: the HPA keeps its replicas rather than scale on a
		// wrong number.
		q, err := quantityOf(v.V, def, len(ready))
		if err != nil {
			return nil, fmt.Errorf("model %s: %w", m, err)
		}
		items = append(items, external_metrics.ExternalMetricValue{
			MetricName:   metric,
			MetricLabels: map[string]string{ModelLabel: ModelLabelValue(m)},
			Timestamp:    metav1.NewTime(v.Time),
			Value:        q,
		})
	}
	if len(items) == 0 {
		return nil, cmprovider.NewMetricNotFoundForSelectorError(externalResource, metric, namespace, sel)
	}
	return &external_metrics.ExternalMetricValueList{Items: items}, nil
}

// ListAllExternalMetrics implements cmprovider.ExternalMetricsProvider.
func (p *Provider) ListAllExternalMetrics() []cmprovider.ExternalMetricInfo {
	out := make([]cmprovider.ExternalMetricInfo, 0, len(externalMetrics))
	for _, d := range podMetrics {
		if externalMetrics[d.name] {
			out = append(out, cmprovider.ExternalMetricInfo{Metric: d.name})
		}
	}
	if p.cfg.Capacity != nil {
		out = append(out, cmprovider.ExternalMetricInfo{Metric: CapacityUtilization})
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
	if p.cfg.Capacity != nil {
		for _, gr := range []schema.GroupResource{deploymentsResource, statefulsetsResource} {
			out = append(out, cmprovider.CustomMetricInfo{GroupResource: gr, Namespaced: true, Metric: CapacityUtilization})
		}
	}
	return out
}
