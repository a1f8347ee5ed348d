package provider

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	"k8s.io/metrics/pkg/apis/external_metrics"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/gpuscale/gpuscale/pkg/signal/capacity"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
	"github.com/gpuscale/gpuscale/pkg/signal/recommend"
)

// CapacityUtilization is the demand expected over a workload's start-up
// horizon over what its Ready replicas serve within the objective
// (pkg/signal/capacity). Served for Deployments and StatefulSets, and per model
// as an external metric; an HPA targets it with a value, the README's
// recommend.CapacityTarget (800m), which leaves headroom for growth within
// a start-up.
const CapacityUtilization = "inference_capacity_utilization"

// CapacityEstimator turns a workload's pods into the capacity signal.
type CapacityEstimator interface {
	Estimate(k capacity.Key, now time.Time, pods []capacity.Pod) (capacity.Estimate, error)
}

// PrefillHistograms is what a Values source may serve besides values: each
// pod's newest cumulative prefill-time histogram (vLLM's
// request_prefill_time_seconds), nil where it has none fresh. The capacity
// signal's prefill term reads it; with a source that does not serve it (the
// PromQL source) the signal rests on its KV-cache term alone.
type PrefillHistograms interface {
	PodPrefill(ctx context.Context, set *PodSet, sel labels.Selector) ([]*histogram.Histogram, error)
}

// TTFTHistograms is, likewise, each pod's newest cumulative
// time-to-first-token histogram: the capacity signal's closed loop measures
// the objective's quantile on it, and without it the loop holds its
// correction at 1.
type TTFTHistograms interface {
	PodTTFT(ctx context.Context, set *PodSet, sel labels.Selector) ([]*histogram.Histogram, error)
}

// ITLHistograms is PrefillHistograms for the inter-token latency
// histograms, which the capacity signal's ITL term reads (with an ITL
// objective; not of prefill pods, which generate no second token).
type ITLHistograms interface {
	PodITL(ctx context.Context, set *PodSet, sel labels.Selector) ([]*histogram.Histogram, error)
}

// capacityInputs are the per-pod values the estimate reads.
var capacityInputs = [...]string{RequestsRunning, QueueDepth, KVCacheUtilization}

// maxCapacityUtilization bounds a served utilization: a million times a
// workload's capacity is no measurement, whatever the inputs said.
const maxCapacityUtilization = 1e6

// capacityPods reads what the estimator needs of pods: every pod counts
// for the horizon and the loading credit; Ready pods with all three
// values matching sel carry the demand. A decode pool's pods are read
// without their prefill-time histograms (their "prefill" is the KV cache's
// arrival, not work the pool does), a prefill pool's without their ITL
// histograms, and every pool's without them when its estimator has no use
// for them (ITLReader).
func (p *Provider) capacityPods(ctx context.Context, namespace string, pods []*corev1.Pod, sel labels.Selector, loading bool, role Role) ([]capacity.Pod, error) {
	ready := readyPods(pods)
	var (
		vals               [len(capacityInputs)][]Value
		prefill, itl, ttft []*histogram.Histogram
	)
	if len(ready) > 0 {
		set := NewPodSet(namespace, ready)
		if ph, ok := p.cfg.Values.(PrefillHistograms); ok && role != RoleDecode {
			var err error
			if prefill, err = ph.PodPrefill(ctx, set, sel); err != nil {
				return nil, &sourceError{err}
			}
			if len(prefill) != len(ready) {
				return nil, &sourceError{fmt.Errorf("%d prefill histograms for %d pods", len(prefill), len(ready))}
			}
		}
		if th, ok := p.cfg.Values.(TTFTHistograms); ok {
			var err error
			if ttft, err = th.PodTTFT(ctx, set, sel); err != nil {
				return nil, &sourceError{err}
			}
			if len(ttft) != len(ready) {
				return nil, &sourceError{fmt.Errorf("%d TTFT histograms for %d pods", len(ttft), len(ready))}
			}
		}
		if ih, ok := p.cfg.Values.(ITLHistograms); ok && role != RolePrefill && p.readsITL(role) {
			var err error
			if itl, err = ih.PodITL(ctx, set, sel); err != nil {
				return nil, &sourceError{err}
			}
			if len(itl) != len(ready) {
				return nil, &sourceError{fmt.Errorf("%d ITL histograms for %d pods", len(itl), len(ready))}
			}
		}
		for i, name := range capacityInputs {
			def := podMetricsByName[name]
			v, err := p.cfg.Values.Pods(ctx, set, def.metric(), sel)
			if err != nil {
				return nil, &sourceError{err}
			}
			if len(v) != len(ready) {
				return nil, &sourceError{fmt.Errorf("%d values for %d pods", len(v), len(ready))}
			}
			vals[i] = v
		}
	}
	out := make([]capacity.Pod, 0, len(pods))
	for i, pod := range ready {
		c := capacity.Pod{Ready: true}
		c.Startup, _ = recommend.StartupTime(pod)
		c.ReadyAt = readySince(pod)
		run, wait, kv := vals[0][i], vals[1][i], vals[2][i]
		if run.Valid() && wait.Valid() && kv.Valid() {
			c.Data, c.Running, c.Waiting, c.KVPercent = true, run.V, wait.V, kv.V
			c.UID = string(pod.UID)
			if prefill != nil {
				c.Prefill = prefill[i]
			}
			if ttft != nil {
				c.TTFT = ttft[i]
			}
			if itl != nil {
				c.ITL = itl[i]
			}
		} else if !sel.Empty() {
			continue // another model's pod, or one with no values
		}
		out = append(out, c)
	}
	if loading {
		for _, pod := range pods {
			if pod.DeletionTimestamp == nil && !podReady(pod) && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
				out = append(out, capacity.Pod{Loading: true})
			}
		}
	}
	return out, nil
}

// readySince is when pod's Ready condition last turned true, zero when
// it does not say.
func readySince(pod *corev1.Pod) time.Time {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// capacityQuantity checks and converts a utilization for serving.
func capacityQuantity(v float64) (resource.Quantity, error) {
	if math.IsNaN(v) || v < 0 || v > maxCapacityUtilization {
		return resource.Quantity{}, fmt.Errorf("%w: %s: %g", errNotServable, CapacityUtilization, v)
	}
	return *resource.NewMilliQuantity(int64(math.Round(v*1000)), resource.DecimalSI), nil
}

// capacityByName serves the signal of one Deployment or StatefulSet: of
// the role its pod template's labels give (RoleOf), if any.
func (p *Provider) capacityByName(ctx context.Context, gr schema.GroupResource, name types.NamespacedName, pods []*corev1.Pod, ref custom_metrics.ObjectReference) (*custom_metrics.MetricValue, error) {
	role := p.workloadRole(gr, name)
	in, err := p.capacityPods(ctx, name.Namespace, pods, labels.Everything(), true, role)
	if err != nil {
		return nil, err
	}
	var decode []capacity.Pod
	if role == RolePrefill {
		if decode, err = p.decodeOfWorkload(ctx, name.Namespace, pods); err != nil {
			return nil, err
		}
	}
	now := p.cfg.Now()
	est, err := p.estimate(role, capacity.Key{Namespace: name.Namespace, Target: strings.ToLower(ref.Kind) + "/" + name.Name}, now, in, decode)
	if err != nil {
		// No value is a NotFound, as for every metric: the HPA keeps
		// its replicas. Why is in the estimator's error counter.
		return nil, apierrors.NewNotFound(gr, fmt.Sprintf("%s %s: %v", CapacityUtilization, name.Name, err))
	}
	q, err := capacityQuantity(est.Utilization)
	if err != nil {
		return nil, err
	}
	return &custom_metrics.MetricValue{
		DescribedObject: ref,
		Metric:          custom_metrics.MetricIdentifier{Name: CapacityUtilization},
		Timestamp:       metav1.NewTime(now),
		Value:           q,
	}, nil
}

// capacityModel serves the signal of the one model sel names, over the
// namespace's pods serving it, or, when sel names a role too, over those
// of its pods that have the role. Loading pods do not say which model they
// will serve, so they earn no credit here; the HPA still counts them.
func (p *Provider) capacityModel(ctx context.Context, namespace string, sel labels.Selector) (*external_metrics.ExternalMetricValueList, error) {
	model, role, ok := modelAndRole(sel)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("%s needs the selector %s=<model>, and optionally %s=%s or %s=%s",
			CapacityUtilization, ModelLabel, RoleLabel, RolePrefill, RoleLabel, RoleDecode))
	}
	pods, err := p.podsWithRole(namespace, role)
	if err != nil {
		return nil, err
	}
	modelSel := labels.SelectorFromValidatedSet(labels.Set{ModelLabel: model})
	in, err := p.capacityPods(ctx, namespace, pods, modelSel, false, role)
	if err != nil {
		return nil, err
	}
	var decode []capacity.Pod
	if role == RolePrefill {
		if decode, err = p.decodeTTFT(ctx, namespace, model); err != nil {
			return nil, err
		}
	}
	target, itemLabels := "model/"+model, map[string]string{ModelLabel: model}
	if role != RoleNone {
		target += "/" + string(role)
		itemLabels[RoleLabel] = string(role)
	}
	now := p.cfg.Now()
	est, err := p.estimate(role, capacity.Key{Namespace: namespace, Target: target}, now, in, decode)
	if err != nil {
		return nil, cmprovider.NewMetricNotFoundForSelectorError(externalResource, CapacityUtilization, namespace, sel)
	}
	q, err := capacityQuantity(est.Utilization)
	if err != nil {
		return nil, err
	}
	return &external_metrics.ExternalMetricValueList{Items: []external_metrics.ExternalMetricValue{{
		MetricName:   CapacityUtilization,
		MetricLabels: itemLabels,
		Timestamp:    metav1.NewTime(now),
		Value:        q,
	}}}, nil
}

// podsWithRole lists the namespace's pods of role; RoleNone, all of them.
func (p *Provider) podsWithRole(namespace string, role Role) ([]*corev1.Pod, error) {
	all, err := p.cfg.Pods.Pods(namespace).List(labels.Everything())
	if err != nil || role == RoleNone {
		return all, err
	}
	pods := make([]*corev1.Pod, 0, len(all))
	for _, pod := range all {
		if RoleOf(pod.Labels) == role {
			pods = append(pods, pod)
		}
	}
	return pods, nil
}

// ITLReader is a CapacityEstimator that says whether it reads the ITL
// histograms: one without an ITL objective does not, and they are then
// neither read for it nor, with nobody else reading them, parsed.
type ITLReader interface {
	ReadsITL() bool
}

// readsITL reports whether role's estimator reads ITL histograms (one that
// does not say is taken to).
func (p *Provider) readsITL(role Role) bool {
	r, ok := p.estimator(role).(ITLReader)
	return !ok || r.ReadsITL()
}

// PrefillPoolEstimator is a CapacityEstimator that holds a prefill pool's
// prefill term to what its decode pool's part of a time to first token
// leaves of the objective (capacity.Estimator.EstimatePrefillPool).
type PrefillPoolEstimator interface {
	EstimatePrefillPool(k capacity.Key, now time.Time, pods, decode []capacity.Pod) (capacity.Estimate, error)
}

// estimate runs role's estimator over in; a prefill pool's with its decode
// pool's TTFT histograms, decode, when the estimator takes them.
func (p *Provider) estimate(role Role, k capacity.Key, now time.Time, in, decode []capacity.Pod) (capacity.Estimate, error) {
	e := p.estimator(role)
	if pe, ok := e.(PrefillPoolEstimator); ok && role == RolePrefill {
		return pe.EstimatePrefillPool(k, now, in, decode)
	}
	return e.Estimate(k, now, in)
}

// decodeOfWorkload is decodeTTFT for the model a prefill workload's Ready
// pods serve: none when they serve no model or several (nothing tells
// which decode pool follows which), so that the pool keeps the whole
// objective.
func (p *Provider) decodeOfWorkload(ctx context.Context, namespace string, pods []*corev1.Pod) ([]capacity.Pod, error) {
	ready := readyPods(pods)
	if len(ready) == 0 {
		return nil, nil
	}
	models, err := p.cfg.Values.Models(ctx, namespace, ready, podMetricsByName[RequestsRunning].metric(), labels.Everything())
	if err != nil {
		return nil, &sourceError{err}
	}
	if len(models) != 1 {
		return nil, nil
	}
	for model := range models {
		return p.decodeTTFT(ctx, namespace, model)
	}
	return nil, nil
}

// decodeTTFT reads the newest TTFT histogram of each Ready decode pod of
// the namespace serving model: what a prefill pool's share of the
// objective is worked out from. Nothing without a source of histograms
// (the PromQL source), and then the prefill pool keeps the whole
// objective.
func (p *Provider) decodeTTFT(ctx context.Context, namespace, model string) ([]capacity.Pod, error) {
	th, ok := p.cfg.Values.(TTFTHistograms)
	if !ok {
		return nil, nil
	}
	pods, err := p.podsWithRole(namespace, RoleDecode)
	if err != nil {
		return nil, err
	}
	ready := readyPods(pods)
	if len(ready) == 0 {
		return nil, nil
	}
	hs, err := th.PodTTFT(ctx, NewPodSet(namespace, ready), labels.SelectorFromValidatedSet(labels.Set{ModelLabel: ModelLabelValue(model)}))
	if err != nil {
		return nil, &sourceError{err}
	}
	if len(hs) != len(ready) {
		return nil, &sourceError{fmt.Errorf("%d TTFT histograms for %d pods", len(hs), len(ready))}
	}
	out := make([]capacity.Pod, 0, len(ready))
	for i, pod := range ready {
		if hs[i] != nil {
			out = append(out, capacity.Pod{Ready: true, UID: string(pod.UID), TTFT: hs[i]})
		}
	}
	return out, nil
}

// estimator is the capacity estimator of a role's pool: Config's for the
// role if it has one, else Config.Capacity.
func (p *Provider) estimator(role Role) CapacityEstimator {
	if e := p.cfg.CapacityByRole[role]; e != nil && role != RoleNone {
		return e
	}
	return p.cfg.Capacity
}

// workloadRole is the role of a Deployment's or StatefulSet's pod
// template, none when the object is gone.
func (p *Provider) workloadRole(gr schema.GroupResource, name types.NamespacedName) Role {
	switch gr {
	case deploymentsResource:
		if d, err := p.cfg.Deployments.Deployments(name.Namespace).Get(name.Name); err == nil {
			return RoleOf(d.Spec.Template.Labels)
		}
	case statefulsetsResource:
		if s, err := p.cfg.StatefulSets.StatefulSets(name.Namespace).Get(name.Name); err == nil {
			return RoleOf(s.Spec.Template.Labels)
		}
	}
	return RoleNone
}

// oneModel returns the model a selector pins with model_name=<model>.
func oneModel(sel labels.Selector) (string, bool) {
	if sel == nil {
		return "", false
	}
	reqs, _ := sel.Requirements()
	if len(reqs) != 1 || reqs[0].Key() != ModelLabel {
		return "", false
	}
	switch reqs[0].Operator() {
	case selection.Equals, selection.DoubleEquals, selection.In:
		if vals := reqs[0].Values(); vals.Len() == 1 {
			return vals.UnsortedList()[0], true
		}
	}
	return "", false
}
