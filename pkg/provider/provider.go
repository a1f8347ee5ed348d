// Package provider serves gpuscale's signals through the Kubernetes custom
// and external metrics APIs (sigs.k8s.io/custom-metrics-apiserver). It reads
// Kubernetes objects from informer caches and values from the in-memory
// store, so an API call costs no request to the API server or to a target.
package provider

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/gpuscale/gpuscale/pkg/histogram"
	"github.com/gpuscale/gpuscale/pkg/store"
)

// Observer records the outcome of each metric request, so operators can
// see which metric went missing and why.
type Observer interface {
	Observe(api, metric, resource, result string)
}

// Config wires a Provider.
type Config struct {
	Store        *store.Store
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
}

// Provider implements cmprovider.MetricsProvider.
type Provider struct {
	cfg Config
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
	return &Provider{cfg: cfg}
}

// value is one computed metric value.
type value struct {
	v  float64
	ts time.Time
}

// GetMetricByName implements cmprovider.CustomMetricsProvider.
func (p *Provider) GetMetricByName(ctx context.Context, name types.NamespacedName, info cmprovider.CustomMetricInfo, metricSelector labels.Selector) (*custom_metrics.MetricValue, error) {
	mv, err := p.metricByName(name, info, metricSelector)
	p.cfg.Observer.Observe("custom", info.Metric, info.GroupResource.String(), result(err))
	return mv, err
}

func (p *Provider) metricByName(name types.NamespacedName, info cmprovider.CustomMetricInfo, sel labels.Selector) (*custom_metrics.MetricValue, error) {
	gr, ok := kindOf(info.GroupResource)
	if !ok {
		return nil, cmprovider.NewMetricNotFoundError(info.GroupResource, info.Metric)
	}
	now := p.cfg.Now()
	if gr == nodesResource {
		return p.nodeValue(name.Name, info.Metric, now)
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
		v, ok := p.podValue(pod, def, sel, now)
		if !ok {
			return nil, cmprovider.NewMetricNotFoundForError(gr, info.Metric, name.Name)
		}
		mv := p.metricValue(podRef(pod), def, v)
		return &mv, nil
	case deploymentsResource, statefulsetsResource, namespacesResource:
		pods, ref, err = p.workloadPods(gr, name)
	}
	if err != nil {
		return nil, notFoundOr(err, gr, info.Metric, name.Name)
	}
	v, ok := p.aggregate(pods, def, sel, now)
	if !ok {
		return nil, cmprovider.NewMetricNotFoundForError(gr, info.Metric, name.Name)
	}
	mv := p.metricValue(ref, def, v)
	return &mv, nil
}

// GetMetricBySelector implements cmprovider.CustomMetricsProvider. For pods
// this is the HPA's Pods-metric call; every ready pod with a fresh value is
// listed, and an empty answer is an explicit NotFound, never an empty
// success.
func (p *Provider) GetMetricBySelector(ctx context.Context, namespace string, selector labels.Selector, info cmprovider.CustomMetricInfo, metricSelector labels.Selector) (*custom_metrics.MetricValueList, error) {
	list, err := p.metricBySelector(namespace, selector, info, metricSelector)
	p.cfg.Observer.Observe("custom", info.Metric, info.GroupResource.String(), result(err))
	return list, err
}

func (p *Provider) metricBySelector(namespace string, selector labels.Selector, info cmprovider.CustomMetricInfo, sel labels.Selector) (*custom_metrics.MetricValueList, error) {
	gr, ok := kindOf(info.GroupResource)
	if !ok {
		return nil, cmprovider.NewMetricNotFoundError(info.GroupResource, info.Metric)
	}
	now := p.cfg.Now()
	var items []custom_metrics.MetricValue
	switch gr {
	case nodesResource:
		nodes, err := p.cfg.Nodes.List(selector)
		if err != nil {
			return nil, err
		}
		for _, n := range nodes {
			if mv, err := p.nodeValue(n.Name, info.Metric, now); err == nil {
				items = append(items, *mv)
			}
		}
	case podsResource:
		def, ok := podMetricsByName[info.Metric]
		if !ok {
			return nil, cmprovider.NewMetricNotFoundError(gr, info.Metric)
		}
		pods, err := p.cfg.Pods.Pods(namespace).List(selector)
		if err != nil {
			return nil, err
		}
		items = make([]custom_metrics.MetricValue, 0, len(pods))
		for _, pod := range pods {
			if v, ok := p.podValue(pod, def, sel, now); ok {
				items = append(items, p.metricValue(podRef(pod), def, v))
			}
		}
	case deploymentsResource, statefulsetsResource:
		names, err := p.workloadNames(gr, namespace, selector)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if mv, err := p.metricByName(types.NamespacedName{Namespace: namespace, Name: n}, info, sel); err == nil {
				items = append(items, *mv)
			}
		}
	default:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("listing %s by label selector is not supported; name the object", gr.String()))
	}
	if len(items) == 0 {
		return nil, cmprovider.NewMetricNotFoundForSelectorError(gr, info.Metric, "*", selector)
	}
	return &custom_metrics.MetricValueList{Items: items}, nil
}

// podValue is a pod's value: none unless the pod is Ready and its newest
// sample is fresh. A loading model reports an idle queue that would drag
// an average down; a dead target's last sample is not today's value.
func (p *Provider) podValue(pod *corev1.Pod, def metricDef, sel labels.Selector, now time.Time) (value, bool) {
	if !podReady(pod) {
		return value{}, false
	}
	key := store.Key{Namespace: pod.Namespace, Name: pod.Name}
	smp, ok := p.cfg.Store.Latest(key, def.source, now, p.cfg.MaxStaleness)
	if !ok || !modelMatches(sel, smp) {
		return value{}, false
	}
	if def.isTTFT() {
		inc, ok := p.ttftIncrease(key, now)
		if !ok {
			return value{}, false
		}
		q := histogram.Quantile(def.quantile, inc)
		if math.IsNaN(q) || math.IsInf(q, 0) {
			return value{}, false
		}
		return value{v: q, ts: smp.Time}, true
	}
	v, ok := smp.Get(def.signal)
	return value{v: v, ts: smp.Time}, ok
}

// ttftIncrease is the per-bucket increase of a pod's TTFT histogram over
// the window, which is what rate() feeds histogram_quantile in PromQL.
func (p *Provider) ttftIncrease(key store.Key, now time.Time) (*histogram.Histogram, bool) {
	return p.cfg.Store.TTFTIncrease(key, now, p.cfg.TTFTWindow, p.cfg.MaxStaleness)
}

// aggregate combines the pods of a workload: sums for queue depth and
// running requests, means for utilizations, and for TTFT a quantile of the
// merged histogram increases (never a mean of quantiles).
func (p *Provider) aggregate(pods []*corev1.Pod, def metricDef, sel labels.Selector, now time.Time) (value, bool) {
	var (
		total  float64
		n      int
		newest time.Time
		incs   []*histogram.Histogram
	)
	for _, pod := range pods {
		if !podReady(pod) {
			continue
		}
		key := store.Key{Namespace: pod.Namespace, Name: pod.Name}
		smp, ok := p.cfg.Store.Latest(key, def.source, now, p.cfg.MaxStaleness)
		if !ok || !modelMatches(sel, smp) {
			continue
		}
		if def.isTTFT() {
			if inc, ok := p.ttftIncrease(key, now); ok {
				incs = append(incs, inc)
				newest = later(newest, smp.Time)
			}
			continue
		}
		if v, ok := smp.Get(def.signal); ok {
			total += v
			n++
			newest = later(newest, smp.Time)
		}
	}
	if def.isTTFT() {
		q, ok := quantileOf(def.quantile, incs)
		return value{v: q, ts: newest}, ok
	}
	if n == 0 {
		return value{}, false
	}
	if def.agg == mean {
		total /= float64(n)
	}
	return value{v: total, ts: newest}, true
}

func (p *Provider) nodeValue(node, metric string, now time.Time) (*custom_metrics.MetricValue, error) {
	if !nodeMetrics[metric] {
		return nil, cmprovider.NewMetricNotFoundError(nodesResource, metric)
	}
	def := podMetricsByName[metric]
	smp, ok := p.cfg.Store.LatestNode(node, now, p.cfg.MaxStaleness)
	v, has := smp.Get(def.signal)
	if !ok || !has {
		return nil, cmprovider.NewMetricNotFoundForError(nodesResource, metric, node)
	}
	ref := custom_metrics.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node}
	mv := p.metricValue(ref, def, value{v: v, ts: smp.Time})
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
		s, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
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
		sel, err := metav1.LabelSelectorAsSelector(s.Spec.Selector)
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
	pods, err := p.cfg.Pods.Pods(ns).List(selector)
	return pods, ref, err
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

func (p *Provider) metricValue(ref custom_metrics.ObjectReference, def metricDef, v value) custom_metrics.MetricValue {
	mv := custom_metrics.MetricValue{
		DescribedObject: ref,
		Metric:          custom_metrics.MetricIdentifier{Name: def.name},
		Timestamp:       metav1.NewTime(v.ts),
		Value:           quantity(v.v, def.format),
	}
	if def.isTTFT() {
		w := int64(p.cfg.TTFTWindow / time.Second)
		mv.WindowSeconds = &w
	}
	return mv
}

// quantity keeps three decimals: HPAs compare at milli-unit precision, and
// TTFT in seconds needs millisecond resolution.
func quantity(v float64, f resource.Format) resource.Quantity {
	if f == resource.BinarySI {
		return *resource.NewQuantity(int64(math.Round(v)), f)
	}
	return *resource.NewMilliQuantity(int64(math.Round(v*1000)), f)
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

// modelMatches applies a metric label selector to the served model, the one
// label gpuscale's inference metrics carry.
func modelMatches(sel labels.Selector, smp store.Sample) bool {
	return sel == nil || sel.Empty() || sel.Matches(labels.Set{ModelLabel: smp.Model})
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func notFoundOr(err error, gr schema.GroupResource, metric, name string) error {
	if apierrors.IsNotFound(err) {
		return cmprovider.NewMetricNotFoundForError(gr, metric, name)
	}
	return err
}
