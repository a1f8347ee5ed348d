package provider

import (
	"context"
	"math"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/gpuscale/gpuscale/pkg/capacity"
	"github.com/gpuscale/gpuscale/pkg/store"
)

func TestCapacityUtilization(t *testing.T) {
	f := newFixture()
	f.p.cfg.Capacity = capacity.New(capacity.DefaultConfig(), capacity.NewMetrics())
	sel := map[string]string{"app": "llm"}
	_ = f.deploys.Add(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "llm"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}}})
	f.addPod("ml", "a", true, sel)
	f.addPod("ml", "b", true, sel)
	f.addPod("ml", "c", false, sel) // loading: no demand, counted as loading
	at := t0.Add(-time.Second)
	// 10 running requests fill half of each KV cache (20 fit a replica),
	// plus 4 waiting: 24 requests of demand.
	f.put("ml", "a", store.SourceInference, at, "m", map[store.Signal]float64{store.RequestsRunning: 10, store.QueueDepth: 4, store.KVCacheUtilization: 50}, nil)
	f.put("ml", "b", store.SourceInference, at, "m", map[store.Signal]float64{store.RequestsRunning: 10, store.QueueDepth: 0, store.KVCacheUtilization: 50}, nil)
	want := 24 / (2 * capacity.MaxLoad(20, 0.1))

	info := cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Group: "apps", Resource: "deployments"}, Namespaced: true, Metric: CapacityUtilization}
	mv, err := f.p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "ml", Name: "llm"}, info, labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	if got := milli(t, &mv.Value); math.Abs(got-want) > 0.001 {
		t.Errorf("deployment: %v, want %v", got, want)
	}

	ext, err := f.p.GetExternalMetric(context.Background(), "ml", labels.SelectorFromSet(labels.Set{ModelLabel: "m"}), cmprovider.ExternalMetricInfo{Metric: CapacityUtilization})
	if err != nil {
		t.Fatal(err)
	}
	if len(ext.Items) != 1 || ext.Items[0].MetricLabels[ModelLabel] != "m" {
		t.Fatalf("external items: %+v", ext.Items)
	}
	if got := milli(t, &ext.Items[0].Value); math.Abs(got-want) > 0.001 {
		t.Errorf("model: %v, want %v", got, want)
	}
	// A selector that names no single model is refused, not guessed.
	if _, err := f.p.GetExternalMetric(context.Background(), "ml", labels.Everything(), cmprovider.ExternalMetricInfo{Metric: CapacityUtilization}); !apierrors.IsBadRequest(err) {
		t.Errorf("no model selector: %v, want BadRequest", err)
	}
	// An unknown model has no pods and no value.
	if _, err := f.p.GetExternalMetric(context.Background(), "ml", labels.SelectorFromSet(labels.Set{ModelLabel: "other"}), cmprovider.ExternalMetricInfo{Metric: CapacityUtilization}); !apierrors.IsNotFound(err) {
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
			if m.Metric == CapacityUtilization {
				return true
			}
		}
		return false
	}
	if has() {
		t.Error("listed without an estimator")
	}
	f.p.cfg.Capacity = capacity.New(capacity.DefaultConfig(), nil)
	if !has() {
		t.Error("not listed with an estimator")
	}
}
