package provider

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"
)

// wakeValue serves the queue depth of a Deployment or StatefulSet with no
// Ready pod whose Object metric names its model (metric.selector
// model_name=<model>): the model's queue over the namespace, as the
// per-model External metric has it, which at zero servers is what the
// routers in front of the model hold. Without it a workload at zero has no
// pod to report a queue and can never be woken through an Object metric.
//
// The model comes from the HPA's selector, not from the workload: nothing
// in a pod template says which model its server will load (servers name
// it in their own metrics, once running), and the HPA is written by whoever
// scales the workload. No value for the model, or only stale ones, is a
// NotFound as for every metric: the HPA holds its replicas.
func (p *Provider) wakeValue(ctx context.Context, namespace, model string, sel labels.Selector, ref custom_metrics.ObjectReference, def metricDef) (*custom_metrics.MetricValue, error) {
	gr := deploymentsResource
	if ref.Kind == "StatefulSet" {
		gr = statefulsetsResource
	}
	pods, err := p.cfg.Pods.Pods(namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	ready := readyPods(pods)
	if len(ready) == 0 {
		return nil, cmprovider.NewMetricNotFoundForError(gr, def.name, ref.Name)
	}
	byModel, err := p.cfg.Values.Models(ctx, namespace, ready, def.metric(), sel)
	if err != nil {
		return nil, &sourceError{err}
	}
	v, ok := byModel[model]
	if !ok || !v.Valid() {
		return nil, cmprovider.NewMetricNotFoundForError(gr, def.name, ref.Name)
	}
	mv, err := p.metricValue(ref, def, v, len(ready))
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", model, err)
	}
	return &mv, nil
}
