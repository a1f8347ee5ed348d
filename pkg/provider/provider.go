// Package provider serves gpuscale's signals through the Kubernetes custom
// and external metrics APIs (sigs.k8s.io/custom-metrics-apiserver). It reads
// Kubernetes objects from informer caches and values from a Values source:
// the embedded scraper's in-memory store (no request to the API server or to
// a target per call) or a PromQL source (one query per call).
//
// The contract with a source is signals, not storage: a Metric says what it
// is in the vocabulary of pkg/signal (Signal, Source, Hist), which both
// sources share, and this package never imports pkg/adapter/store. It needs nothing
// of storage: no store key or sample crosses Values, since each source turns
// the pods it is given into its own keys (the store's namespace/name keys,
// PromQL's label matchers), so there is nothing for this package to declare
// an interface for, and no sample type for the vocabulary to carry.
package provider

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"
)

// Observer records the outcome of each metric request, so operators can
// see which metric went missing and why.
type Observer interface {
	Observe(api, metric, resource, result string)
}

// Config wires a Provider.
type Config struct {
	// Values is where values come from: the embedded store
	// (pkg/adapter/storesource) or Prometheus (pkg/adapter/promsource). Required.
	Values       Values
	Pods         corelisters.PodLister
	Nodes        corelisters.NodeLister
	Deployments  appslisters.DeploymentLister
	StatefulSets appslisters.StatefulSetLister
	// MaxStaleness is the age past which a sample is no value at all.
	MaxStaleness time.Duration
	// TTFTWindow is the window TTFT quantiles are computed over.
	TTFTWindow time.Duration
	Observer   Observer
	Now        func() time.Time
	// Capacity serves CapacityUtilization; nil: not served.
	Capacity CapacityEstimator
	// CapacityByRole, where it has an estimator for a role, serves
	// CapacityUtilization of that role's pools (RoleOf) in place of
	// Capacity: each role's signal has its own terms.
	CapacityByRole map[Role]CapacityEstimator
}

// Provider implements cmprovider.MetricsProvider.
type Provider struct {
	cfg  Config
	sets *podSets
}

var _ cmprovider.MetricsProvider = (*Provider)(nil)

// New returns a provider; cfg's listers must be backed by started
// informers.
func New(cfg Config) *Provider {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	return &Provider{cfg: cfg, sets: newPodSets(cfg.Pods)}
}

// TrackPods lets the provider reuse its lists of Ready pods until events
// (the informer behind Config.Pods) says a pod changed. Without it, every
// call lists the pods afresh. Call it before serving.
func (p *Provider) TrackPods(events PodEvents) error {
	return p.sets.track(events)
}

// GetMetricByName implements cmprovider.CustomMetricsProvider.
func (p *Provider) GetMetricByName(ctx context.Context, name types.NamespacedName, info cmprovider.CustomMetricInfo, metricSelector labels.Selector) (*custom_metrics.MetricValue, error) {
	mv, err := p.metricByName(ctx, name, info, metricSelector)
	err = apiError(err)
	p.cfg.Observer.Observe("custom", info.Metric, info.GroupResource.String(), result(err))
	return mv, err
}

func (p *Provider) metricByName(ctx context.Context, name types.NamespacedName, info cmprovider.CustomMetricInfo, sel labels.Selector) (*custom_metrics.MetricValue, error) {
	gr, ok := kindOf(info.GroupResource)
	if !ok {
		return nil, cmprovider.NewMetricNotFoundError(info.GroupResource, info.Metric)
	}
	if gr == nodesResource {
		return p.nodeValue(ctx, name.Name, info.Metric)
	}
	if info.Metric == CapacityUtilization && p.cfg.Capacity != nil && (gr == deploymentsResource || gr == statefulsetsResource) {
		pods, ref, err := p.workloadPods(gr, name)
		if err != nil {
			return nil, notFoundOr(err, gr, info.Metric, name.Name)
		}
		return p.capacityByName(ctx, gr, name, pods, ref)
	}
	def, ok := podMetricsByName[info.Metric]
	if !ok {
		return nil, cmprovider.NewMetricNotFoundError(gr, info.Metric)
	}
	var (
		pods []*corev1.Pod
		ref  custom_metrics.ObjectReference
		err  error
	)
	switch gr {
	case podsResource:
		pod, err := p.cfg.Pods.Pods(name.Namespace).Get(name.Name)
		if err != nil {
			return nil, notFoundOr(err, gr, info.Metric, name.Name)
		}
		if !podReady(pod) {
			return nil, cmprovider.NewMetricNotFoundForError(gr, info.Metric, name.Name)
		}
		vals, err := p.cfg.Values.Pods(ctx, NewPodSet(pod.Namespace, []*corev1.Pod{pod}), def.metric(), sel)
		if err != nil {
			return nil, &sourceError{err}
		}
		if len(vals) != 1 {
			return nil, &sourceError{fmt.Errorf("%d values for 1 pod", len(vals))}
		}
		if err := p.groupValues(ctx, []*corev1.Pod{pod}, def.metric(), vals, sel); err != nil {
			return nil, &sourceError{err}
		}
		if !vals[0].Valid() {
			return nil, cmprovider.NewMetricNotFoundForError(gr, info.Metric, name.Name)
		}
		mv, err := p.metricValue(podRef(pod), def, vals[0], 1)
		if err != nil {
			return nil, err
		}
		return &mv, nil
	case deploymentsResource, statefulsetsResource, namespacesResource:
		pods, ref, err = p.workloadPods(gr, name)
	}
	if err != nil {
		return nil, notFoundOr(err, gr, info.Metric, name.Name)
	}
	ready := readyPods(pods)
	if len(ready) == 0 {
		if model, ok := oneModel(sel); ok && def.name == QueueDepth && gr != namespacesResource {
			return p.wakeValue(ctx, name.Namespace, model, sel, ref, def)
		}
		return nil, cmprovider.NewMetricNotFoundForError(gr, info.Metric, name.Name)
	}
	v, ok, err := p.cfg.Values.Workload(ctx, ready[0].Namespace, ready, def.metric(), sel)
	if err != nil {
		return nil, &sourceError{err}
	}
	if !ok {
		return nil, cmprovider.NewMetricNotFoundForError(gr, info.Metric, name.Name)
	}
	// A sum over the pods that leaves what they can add up to, or what a
	// quantity holds, is an error: the HPA keeps its replicas rather
	// than scale on a wrong number.
	mv, err := p.metricValue(ref, def, v, len(ready))
	if err != nil {
		return nil, err
	}
	return &mv, nil
}

// GetMetricBySelector implements cmprovider.CustomMetricsProvider. For pods
// this is the HPA's Pods-metric call; every ready pod with a fresh value is
// listed, and an empty answer is an explicit NotFound, never an empty
// success.
func (p *Provider) GetMetricBySelector(ctx context.Context, namespace string, selector labels.Selector, info cmprovider.CustomMetricInfo, metricSelector labels.Selector) (*custom_metrics.MetricValueList, error) {
	list, err := p.metricBySelector(ctx, namespace, selector, info, metricSelector)
	err = apiError(err)
	p.cfg.Observer.Observe("custom", info.Metric, info.GroupResource.String(), result(err))
	return list, err
}

func (p *Provider) metricBySelector(ctx context.Context, namespace string, selector labels.Selector, info cmprovider.CustomMetricInfo, sel labels.Selector) (*custom_metrics.MetricValueList, error) {
	gr, ok := kindOf(info.GroupResource)
	if !ok {
		return nil, cmprovider.NewMetricNotFoundError(info.GroupResource, info.Metric)
	}
	var (
		items []custom_metrics.MetricValue
		err   error
	)
	switch gr {
	case nodesResource:
		items, err = p.nodesBySelector(ctx, selector, info.Metric)
	case podsResource:
		items, err = p.podsBySelector(ctx, namespace, selector, info.Metric, sel)
	case deploymentsResource, statefulsetsResource:
		var names []string
		if names, err = p.workloadNames(gr, namespace, selector); err != nil {
			return nil, err
		}
		for _, n := range names {
			mv, err := p.metricByName(ctx, types.NamespacedName{Namespace: namespace, Name: n}, info, sel)
			var se *sourceError
			switch {
			case err == nil:
				items = append(items, *mv)
			case errors.As(err, &se):
				return nil, err // the source is down: no partial list
			}
		}
	default:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("listing %s by label selector is not supported; name the object", gr.String()))
	}
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, cmprovider.NewMetricNotFoundForSelectorError(gr, info.Metric, "*", selector)
	}
	return &custom_metrics.MetricValueList{Items: items}, nil
}

func (p *Provider) nodesBySelector(ctx context.Context, selector labels.Selector, metric string) ([]custom_metrics.MetricValue, error) {
	if !nodeMetrics[metric] {
		return nil, nil
	}
	nodes, err := p.cfg.Nodes.List(selector)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name
	}
	def := podMetricsByName[metric]
	vals, err := p.cfg.Values.Nodes(ctx, names, def.metric())
	if err != nil {
		return nil, err
	}
	var items []custom_metrics.MetricValue
	for _, n := range names {
		v, ok := vals[n]
		if !ok {
			continue
		}
		// A node whose value cannot be served is left out, as one
		// without a value is; the others are listed.
		if mv, err := p.metricValue(nodeRef(n), def, v, 1); err == nil {
			items = append(items, mv)
		}
	}
	return items, nil
}

func (p *Provider) podsBySelector(ctx context.Context, namespace string, selector labels.Selector, metric string, sel labels.Selector) ([]custom_metrics.MetricValue, error) {
	def, ok := podMetricsByName[metric]
	if !ok {
		return nil, cmprovider.NewMetricNotFoundError(podsResource, metric)
	}
	set, err := p.sets.get(namespace, selector)
	if err != nil {
		return nil, err
	}
	if len(set.Pods) == 0 {
		return nil, nil
	}
	vals, err := p.cfg.Values.Pods(ctx, set, def.metric(), sel)
	if err != nil {
		return nil, err
	}
	if len(vals) != len(set.Pods) {
		return nil, fmt.Errorf("%d values for %d pods", len(vals), len(set.Pods))
	}
	if err := p.groupValues(ctx, set.Pods, def.metric(), vals, sel); err != nil {
		return nil, err
	}
	n := 0
	for _, v := range vals {
		if v.Valid() {
			n++
		}
	}
	// One backing array, filled in place: at 10,000 pods the items are
	// most of the call's memory, and copying each 256-byte item through a
	// temporary showed in profiles.
	items := newItems(ctx, n)
	fill := p.itemFiller(def)
	names := set.Names()
	n = 0
	for i, v := range vals {
		if !v.Valid() {
			continue
		}
		ns := namespace // the lister's: every pod listed is in it
		if ns == "" {
			ns = set.Pods[i].Namespace
		}
		// A pod whose value cannot be served is left out, as one
		// without a value is; the others are listed.
		if fill(&items[n], ns, names[i], v) == nil {
			n++
		}
	}
	return items[:n], nil
}

func (p *Provider) nodeValue(ctx context.Context, node, metric string) (*custom_metrics.MetricValue, error) {
	if !nodeMetrics[metric] {
		return nil, cmprovider.NewMetricNotFoundError(nodesResource, metric)
	}
	def := podMetricsByName[metric]
	vals, err := p.cfg.Values.Nodes(ctx, []string{node}, def.metric())
	if err != nil {
		return nil, err
	}
	v, ok := vals[node]
	if !ok {
		return nil, cmprovider.NewMetricNotFoundForError(nodesResource, metric, node)
	}
	mv, err := p.metricValue(nodeRef(node), def, v, 1)
	if err != nil {
		return nil, err
	}
	return &mv, nil
}

func (p *Provider) workloadPods(gr schema.GroupResource, name types.NamespacedName) ([]*corev1.Pod, custom_metrics.ObjectReference, error) {
	var (
		selector labels.Selector
		ref      custom_metrics.ObjectReference
		ns       = name.Namespace
	)
	switch gr {
	case deploymentsResource:
		d, err := p.cfg.Deployments.Deployments(ns).Get(name.Name)
		if err != nil {
			return nil, ref, err
		}
		s, err := workloadSelector(d.Spec.Selector)
		if err != nil {
			return nil, ref, fmt.Errorf("deployment %s/%s: selector: %w", ns, name.Name, err)
		}
		selector = s
		ref = custom_metrics.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Namespace: ns, Name: d.Name}
	case statefulsetsResource:
		s, err := p.cfg.StatefulSets.StatefulSets(ns).Get(name.Name)
		if err != nil {
			return nil, ref, err
		}
		sel, err := workloadSelector(s.Spec.Selector)
		if err != nil {
			return nil, ref, fmt.Errorf("statefulset %s/%s: selector: %w", ns, name.Name, err)
		}
		selector = sel
		ref = custom_metrics.ObjectReference{APIVersion: "apps/v1", Kind: "StatefulSet", Namespace: ns, Name: s.Name}
	default: // namespaces: root-scoped, the name is the namespace
		ns = name.Name
		selector = labels.Everything()
		ref = custom_metrics.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: ns}
	}
	// A workload's pods come from the provider's own index of the pods'
	// labels: listing them from the informer cache matches the selector
	// against every pod of the namespace, and with 1,000 Deployments in
	// one namespace that was a fifth of the adapter's CPU under their
	// HPAs.
	if gr != namespacesResource {
		if pods, ok := p.sets.matching(ns, selector); ok {
			return pods, ref, nil
		}
	}
	pods, err := p.cfg.Pods.Pods(ns).List(selector)
	return pods, ref, err
}

// workloadSelector is a workload's pod selector. One of labels only is
// made without checking the labels again: the API server checked them when
// it admitted the workload, and checking each label's syntax on every
// Object read (regular expressions) cost a quarter of the read.
func workloadSelector(sel *metav1.LabelSelector) (labels.Selector, error) {
	if sel != nil && len(sel.MatchExpressions) == 0 && len(sel.MatchLabels) > 0 {
		return labels.SelectorFromValidatedSet(sel.MatchLabels), nil
	}
	return metav1.LabelSelectorAsSelector(sel)
}

func (p *Provider) workloadNames(gr schema.GroupResource, ns string, selector labels.Selector) ([]string, error) {
	var names []string
	switch gr {
	case deploymentsResource:
		ds, err := p.cfg.Deployments.Deployments(ns).List(selector)
		if err != nil {
			return nil, err
		}
		for _, d := range ds {
			names = append(names, d.Name)
		}
	case statefulsetsResource:
		ss, err := p.cfg.StatefulSets.StatefulSets(ns).List(selector)
		if err != nil {
			return nil, err
		}
		for _, s := range ss {
			names = append(names, s.Name)
		}
	}
	sort.Strings(names)
	return names, nil
}

// metricValue builds the item of ref's value v, aggregated over pods pods
// (see quantityOf).
func (p *Provider) metricValue(ref custom_metrics.ObjectReference, def metricDef, v Value, pods int) (custom_metrics.MetricValue, error) {
	q, err := quantityOf(v.V, def, pods)
	if err != nil {
		return custom_metrics.MetricValue{}, fmt.Errorf("%s %s: %w", ref.Kind, ref.Name, err)
	}
	mv := custom_metrics.MetricValue{
		DescribedObject: ref,
		Metric:          custom_metrics.MetricIdentifier{Name: def.name},
		Timestamp:       metav1.NewTime(v.Time),
		Value:           q,
	}
	if def.isQuantile() {
		w := int64(p.cfg.TTFTWindow / time.Second)
		mv.WindowSeconds = &w
	}
	return mv, nil
}

// itemFiller returns a function that writes a pod's item into a zeroed
// MetricValue, as metricValue(podRef(pod), def, v, 1) would build it: only
// the fields that are not zero are written; nothing when the value cannot
// be served (its error). The items of one list share
// one WindowSeconds: nothing writes through it, and one allocation per TTFT
// item added up at 10,000 pods.
func (p *Provider) itemFiller(def metricDef) func(mv *custom_metrics.MetricValue, namespace, name string, v Value) error {
	var window *int64
	if def.isQuantile() {
		w := int64(p.cfg.TTFTWindow / time.Second)
		window = &w
	}
	qs := &quantities{def: def}
	return func(mv *custom_metrics.MetricValue, namespace, name string, v Value) error {
		q, err := qs.of(v.V)
		if err != nil {
			return err
		}
		ref := &mv.DescribedObject
		ref.APIVersion, ref.Kind, ref.Namespace, ref.Name = "v1", "Pod", namespace, name
		mv.Metric.Name = def.name
		mv.Timestamp = metav1.NewTime(v.Time)
		mv.WindowSeconds = window
		mv.Value = q
		return nil
	}
}

func nodeRef(name string) custom_metrics.ObjectReference {
	return custom_metrics.ObjectReference{APIVersion: "v1", Kind: "Node", Name: name}
}

func podRef(p *corev1.Pod) custom_metrics.ObjectReference {
	return custom_metrics.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: p.Namespace, Name: p.Name}
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// sourceError is a failure of the Values source, as opposed to a missing
// object: listing workloads skips the latter but not the former.
type sourceError struct{ err error }

func (e *sourceError) Error() string { return e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

func notFoundOr(err error, gr schema.GroupResource, metric, name string) error {
	if apierrors.IsNotFound(err) {
		return cmprovider.NewMetricNotFoundForError(gr, metric, name)
	}
	return err
}
