package provider_test

import (
	"context"
	"math"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// TestITLServedLikeTTFT: the ITL quantiles are served per pod, for a
// Deployment (the pods' increases merged) and per model (External), each
// from the ITL histograms and never from the TTFT ones beside them, with
// the latency window.
func TestITLServedLikeTTFT(t *testing.T) {
	f := newFixture()
	sel := map[string]string{"app": "llm"}
	_ = f.deploys.Add(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "llm"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}}})
	f.addPod("ml", "a", true, sel)
	f.addPod("ml", "b", true, sel)
	// Pod a: 90 gaps in (0, 0.1]; pod b: 10 in (1, 2.5]. Their TTFT
	// histograms say the opposite.
	for i, at := range []time.Time{t0.Add(-50 * time.Second), t0.Add(-5 * time.Second)} {
		k := float64(i)
		for _, p := range []struct {
			name      string
			itl, ttft *histogram.Histogram
		}{{"a", hist(90 * k), hist(0, 0, 0, 0, 0, 90*k)}, {"b", hist(0, 0, 0, 0, 10*k), hist(10 * k)}} {
			s := store.Sample{Time: at, Model: "m", TTFT: p.ttft, ITL: p.itl}
			s.Set(signal.QueueDepth, 1)
			f.store.PutPod(store.Key{Namespace: "ml", Name: p.name}, signal.SourceInference, s)
		}
	}
	ctx := context.Background()
	pod, err := f.p.GetMetricByName(ctx, types.NamespacedName{Namespace: "ml", Name: "b"}, podsInfo(provider.ITLP50), labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := milli(t, &pod.Value), histogram.Quantile(0.5, hist(0, 0, 0, 0, 10)); math.Abs(got-want) > 0.001 {
		t.Errorf("pod b ITL p50 = %v, want %v", got, want)
	}
	if pod.WindowSeconds == nil || *pod.WindowSeconds != 60 {
		t.Errorf("window = %v, want 60", pod.WindowSeconds)
	}
	merged := histogram.Quantile(0.9, hist(90, 0, 0, 0, 10))
	dep, err := f.p.GetMetricByName(ctx, types.NamespacedName{Namespace: "ml", Name: "llm"},
		cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Group: "apps", Resource: "deployments"}, Namespaced: true, Metric: provider.ITLP90}, labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	if got := milli(t, &dep.Value); math.Abs(got-merged) > 0.001 {
		t.Errorf("Deployment ITL p90 = %v, want the merged histogram's %v", got, merged)
	}
	m, _ := labels.Parse(provider.ModelLabel + "=m")
	ext, err := f.p.GetExternalMetric(ctx, "ml", m, cmprovider.ExternalMetricInfo{Metric: provider.ITLP90})
	if err != nil {
		t.Fatal(err)
	}
	if len(ext.Items) != 1 || math.Abs(milli(t, &ext.Items[0].Value)-merged) > 0.001 {
		t.Errorf("model ITL p90 = %+v, want %v", ext.Items, merged)
	}
	if ttft := histogram.Quantile(0.9, hist(10, 0, 0, 0, 0, 90)); math.Abs(ttft-merged) < 0.5 {
		t.Fatalf("test is too weak: TTFT p90 %v is ITL's %v", ttft, merged)
	}
}
