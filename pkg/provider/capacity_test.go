package provider_test

import (
	"cmp"
	"context"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/kube/podslim"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/capacity"
)

func TestCapacityUtilization(t *testing.T) {
	f := newFixture()
	f.p.SetCapacity(capacity.New(capacity.DefaultConfig(), capacity.NewMetrics()))
	sel := map[string]string{"app": "llm"}
	_ = f.deploys.Add(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "llm"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}}})
	f.addPod("ml", "a", true, sel)
	f.addPod("ml", "b", true, sel)
	f.addPod("ml", "c", false, sel) // loading: no demand, counted as loading
	at := t0.Add(-time.Second)
	// 10 running requests fill half of each KV cache (20 fit a replica),
	// plus 4 waiting: 24 requests of demand.
	f.put("ml", "a", signal.SourceInference, at, "m", map[signal.Signal]float64{signal.RequestsRunning: 10, signal.QueueDepth: 4, signal.KVCacheUtilization: 50}, nil)
	f.put("ml", "b", signal.SourceInference, at, "m", map[signal.Signal]float64{signal.RequestsRunning: 10, signal.QueueDepth: 0, signal.KVCacheUtilization: 50}, nil)
	want := 24 / (2 * capacity.MaxLoad(20, 0.1))

	info := cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Group: "apps", Resource: "deployments"}, Namespaced: true, Metric: provider.CapacityUtilization}
	mv, err := f.p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "ml", Name: "llm"}, info, labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	if got := milli(t, &mv.Value); math.Abs(got-want) > 0.001 {
		t.Errorf("deployment: %v, want %v", got, want)
	}

	ext, err := f.p.GetExternalMetric(context.Background(), "ml", labels.SelectorFromSet(labels.Set{provider.ModelLabel: "m"}), cmprovider.ExternalMetricInfo{Metric: provider.CapacityUtilization})
	if err != nil {
		t.Fatal(err)
	}
	if len(ext.Items) != 1 || ext.Items[0].MetricLabels[provider.ModelLabel] != "m" {
		t.Fatalf("external items: %+v", ext.Items)
	}
	if got := milli(t, &ext.Items[0].Value); math.Abs(got-want) > 0.001 {
		t.Errorf("model: %v, want %v", got, want)
	}
	// A selector that names no single model is refused, not guessed.
	if _, err := f.p.GetExternalMetric(context.Background(), "ml", labels.Everything(), cmprovider.ExternalMetricInfo{Metric: provider.CapacityUtilization}); !apierrors.IsBadRequest(err) {
		t.Errorf("no model selector: %v, want BadRequest", err)
	}
	// An unknown model has no pods and no value.
	if _, err := f.p.GetExternalMetric(context.Background(), "ml", labels.SelectorFromSet(labels.Set{provider.ModelLabel: "other"}), cmprovider.ExternalMetricInfo{Metric: provider.CapacityUtilization}); !apierrors.IsNotFound(err) {
		t.Errorf("unknown model: %v, want NotFound", err)
	}

	// Stale samples are no demand: NotFound, never a number.
	f.now = t0.Add(time.Minute)
	if _, err := f.p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "ml", Name: "llm"}, info, labels.Everything()); !apierrors.IsNotFound(err) {
		t.Errorf("stale: %v, want NotFound", err)
	}
}

func TestCapacityListedOnlyWhenServed(t *testing.T) {
	f := newFixture()
	has := func() bool {
		for _, m := range f.p.ListAllMetrics() {
			if m.Metric == provider.CapacityUtilization {
				return true
			}
		}
		return false
	}
	if has() {
		t.Error("listed without an estimator")
	}
	f.p.SetCapacity(capacity.New(capacity.DefaultConfig(), nil))
	if !has() {
		t.Error("not listed with an estimator")
	}
}

// recordingEstimator keeps the pods the provider hands the estimator.
type recordingEstimator struct{ pods []capacity.Pod }

func (r *recordingEstimator) Estimate(_ capacity.Key, _ time.Time, pods []capacity.Pod) (capacity.Estimate, error) {
	r.pods = append([]capacity.Pod(nil), pods...)
	return capacity.Estimate{Utilization: 1}, nil
}

// TestCapacityOnSlimPods: the estimator gets the same pods, start-up times
// included, from pods slimmed by KeepPodFields as from full ones.
func TestCapacityOnSlimPods(t *testing.T) {
	sel := map[string]string{"app": "llm"}
	created := metav1.NewTime(t0.Add(-5 * time.Minute))
	mk := func(name string, ready corev1.ConditionStatus, readyAt time.Duration) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID("uid-" + name), Labels: sel, ResourceVersion: "1", CreationTimestamp: created},
			Spec:       corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "vllm"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: ready, LastTransitionTime: metav1.NewTime(created.Add(readyAt))}}},
		}
	}
	pods := []*corev1.Pod{mk("a", corev1.ConditionTrue, 70*time.Second), mk("b", corev1.ConditionTrue, 90*time.Second), mk("c", corev1.ConditionFalse, 0)}
	seen := func(slim bool) []capacity.Pod {
		f := newFixture()
		rec := &recordingEstimator{}
		f.p.SetCapacity(rec)
		_ = f.deploys.Add(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "llm"},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}}})
		for _, p := range pods {
			if slim {
				p = podslim.Slim(p, provider.KeepPodFields)
			}
			f.putObject(p)
			smp := store.Sample{Time: t0, Model: "m", Prefill: hist(3, 1)}
			smp.Set(signal.RequestsRunning, 4)
			smp.Set(signal.QueueDepth, 1)
			smp.Set(signal.KVCacheUtilization, 20)
			f.store.PutPod(store.Key{Namespace: "ml", Name: p.Name}, signal.SourceInference, smp)
		}
		info := cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Group: "apps", Resource: "deployments"}, Namespaced: true, Metric: provider.CapacityUtilization}
		if _, err := f.p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "ml", Name: "llm"}, info, labels.Everything()); err != nil {
			t.Fatal(err)
		}
		// The lister's order is a map's.
		slices.SortFunc(rec.pods, func(a, b capacity.Pod) int { return cmp.Compare(a.Startup, b.Startup) })
		return rec.pods
	}
	full, slim := seen(false), seen(true)
	if !reflect.DeepEqual(full, slim) {
		t.Errorf("estimator inputs differ:\nfull %+v\nslim %+v", full, slim)
	}
	// The prefill term follows each server's cumulative histogram by pod
	// UID, so the slim cache must keep it.
	for _, p := range full {
		if p.Data && (p.UID == "" || p.Prefill == nil || p.Prefill.Count != 4) {
			t.Errorf("ready pod without its UID and prefill histogram: %+v", p)
		}
	}
	var startups []time.Duration
	for _, p := range full {
		if p.Startup > 0 {
			startups = append(startups, p.Startup)
		}
	}
	if !slices.Equal(startups, []time.Duration{70 * time.Second, 90 * time.Second}) {
		t.Errorf("start-up times %v, want the two Ready pods' 70s and 90s", startups)
	}
	// When each turned Ready, for the settled spreads
	// (capacity.Config.SettledSpread).
	for _, p := range full {
		if want := created.Add(p.Startup); p.Ready && !p.ReadyAt.Equal(want) {
			t.Errorf("Ready pod with start-up %v: ReadyAt %v, want %v", p.Startup, p.ReadyAt, want)
		}
	}
}

// itlEstimator is a recordingEstimator that says whether it reads ITL.
type itlEstimator struct {
	recordingEstimator
	reads bool
}

func (e *itlEstimator) ReadsITL() bool { return e.reads }

// TestCapacityReadsITLOnlyForItsEstimator: the pods' ITL histograms go to
// an estimator that reads them or does not say, and are not read for one
// that does not (no ITL objective), so that nobody makes them be parsed.
func TestCapacityReadsITLOnlyForItsEstimator(t *testing.T) {
	sel := map[string]string{"app": "llm"}
	for _, tc := range []struct {
		name string
		est  interface {
			provider.CapacityEstimator
			recorded() []capacity.Pod
		}
		want bool
	}{
		{"does not say", &recordingEstimator{}, true},
		{"reads ITL", &itlEstimator{reads: true}, true},
		{"no ITL objective", &itlEstimator{reads: false}, false},
		{"the real estimator without an ITL objective", realEstimator(0), false},
		{"the real estimator with one", realEstimator(100 * time.Millisecond), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			f.p.SetCapacity(tc.est)
			_ = f.deploys.Add(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "llm"},
				Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}}})
			f.addPod("ml", "a", true, sel)
			smp := store.Sample{Time: t0, Model: "m", ITL: hist(3, 1)}
			smp.Set(signal.RequestsRunning, 4)
			smp.Set(signal.QueueDepth, 1)
			smp.Set(signal.KVCacheUtilization, 20)
			f.store.PutPod(store.Key{Namespace: "ml", Name: "a"}, signal.SourceInference, smp)
			info := cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Group: "apps", Resource: "deployments"}, Namespaced: true, Metric: provider.CapacityUtilization}
			_, _ = f.p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "ml", Name: "llm"}, info, labels.Everything())
			pods := tc.est.recorded()
			if len(pods) != 1 {
				t.Fatalf("the estimator got %d pods", len(pods))
			}
			if got := pods[0].ITL != nil; got != tc.want {
				t.Errorf("ITL handed over: %v, want %v", got, tc.want)
			}
		})
	}
}

func (r *recordingEstimator) recorded() []capacity.Pod { return r.pods }

// recordingReal is the real estimator, recording the pods it gets.
type recordingReal struct {
	*capacity.Estimator
	pods []capacity.Pod
}

func (r *recordingReal) Estimate(k capacity.Key, now time.Time, pods []capacity.Pod) (capacity.Estimate, error) {
	r.pods = append([]capacity.Pod(nil), pods...)
	return r.Estimator.Estimate(k, now, pods)
}

func (r *recordingReal) recorded() []capacity.Pod { return r.pods }

func realEstimator(itl time.Duration) *recordingReal {
	cfg := capacity.DefaultConfig()
	cfg.ITLObjective = itl
	return &recordingReal{Estimator: capacity.New(cfg, nil)}
}
