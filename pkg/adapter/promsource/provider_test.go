package promsource

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/adapter/storesource"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// TestProviderRulesBothSources runs the provider's shared rules over the
// embedded and the PromQL source: not-Ready pods get no value (and are not
// even asked about), nothing at all is NotFound, never an empty success.
func TestProviderRulesBothSources(t *testing.T) {
	f := newFakeProm(t)
	// Prometheus knows a value for every pod, ready or not.
	f.setReply(func(q string) (int, string) {
		if strings.Contains(q, "model_name") && strings.HasPrefix(q, "sum by (model_name)") {
			return 200, vector(t0, series{map[string]string{"model_name": "m"}, "7"})
		}
		return 200, vector(t0, series{podLabels("ready"), "7"}, series{podLabels("loading"), "1"})
	})
	st := store.New(10)
	for _, name := range []string{"ready", "loading"} {
		var s store.Sample
		s.Time, s.Model = t0.Add(-time.Second), "m"
		s.Set(signal.QueueDepth, 7)
		if name == "loading" {
			s.Set(signal.QueueDepth, 1)
		}
		st.PutPod(store.Key{Namespace: "ml", Name: name}, signal.SourceInference, s)
	}
	sources := map[string]provider.Values{
		"embedded":   storesource.New(st, 15*time.Second, time.Minute, func() time.Time { return t0 }),
		"prometheus": newSource(t, f),
	}
	for name, values := range sources {
		t.Run(name, func(t *testing.T) {
			checkRules(t, values, f)
		})
	}
}

func checkRules(t *testing.T, values provider.Values, f *fakeProm) {
	idx := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	pods, deploys := idx(), idx()
	_ = pods.Add(pod("ml", "ready", true))
	_ = pods.Add(pod("ml", "loading", false))
	_ = pods.Add(pod("idle", "loading", false))
	for _, ns := range []string{"ml", "idle"} {
		_ = deploys.Add(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llm"},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "llm"}}}})
	}
	p := provider.New(provider.Config{Values: values, Pods: corelisters.NewPodLister(pods), Nodes: corelisters.NewNodeLister(idx()),
		Deployments: appslisters.NewDeploymentLister(deploys), StatefulSets: appslisters.NewStatefulSetLister(idx()),
		MaxStaleness: 15 * time.Second, TTFTWindow: time.Minute, Now: func() time.Time { return t0 }})
	ctx := context.Background()
	podsInfo := cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Resource: "pods"}, Namespaced: true, Metric: provider.QueueDepth}
	deployInfo := cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Group: "apps", Resource: "deployments"}, Namespaced: true, Metric: provider.QueueDepth}
	f.take()

	list, err := p.GetMetricBySelector(ctx, "ml", labels.Everything(), podsInfo, labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].DescribedObject.Name != "ready" || list.Items[0].Value.MilliValue() != 7000 {
		t.Fatalf("pods = %+v, want only the ready pod, 7", list.Items)
	}
	mv, err := p.GetMetricByName(ctx, types.NamespacedName{Namespace: "ml", Name: "llm"}, deployInfo, labels.Everything())
	if err != nil || mv.Value.MilliValue() != 7000 {
		t.Fatalf("deployment = %+v, %v; want 7 from the ready pod only", mv, err)
	}
	ext, err := p.GetExternalMetric(ctx, "ml", labels.Everything(), cmprovider.ExternalMetricInfo{Metric: provider.QueueDepth})
	if err != nil || len(ext.Items) != 1 || ext.Items[0].Value.MilliValue() != 7000 {
		t.Fatalf("external = %+v, %v", ext, err)
	}
	for _, r := range f.take() {
		if strings.Contains(r.query, "loading") {
			t.Errorf("a not-ready pod was asked about: %s", r.query)
		}
	}
	notFound := map[string]error{}
	_, notFound["not-ready pod"] = p.GetMetricByName(ctx, types.NamespacedName{Namespace: "ml", Name: "loading"}, podsInfo, labels.Everything())
	_, notFound["no ready pods"] = p.GetMetricBySelector(ctx, "idle", labels.Everything(), podsInfo, labels.Everything())
	_, notFound["deployment without ready pods"] = p.GetMetricByName(ctx, types.NamespacedName{Namespace: "idle", Name: "llm"}, deployInfo, labels.Everything())
	_, notFound["external without ready pods"] = p.GetExternalMetric(ctx, "idle", labels.Everything(), cmprovider.ExternalMetricInfo{Metric: provider.QueueDepth})
	for what, err := range notFound {
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s: err = %v, want NotFound", what, err)
		}
	}
	if n := len(f.take()); n != 0 {
		t.Errorf("%d queries for requests with no ready pod, want none", n)
	}
}

// TestProviderPrometheusDown: a failing Prometheus is an error of the API
// request that names it, not a NotFound and not a crash; and it recovers.
func TestProviderPrometheusDown(t *testing.T) {
	f := newFakeProm(t)
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	_ = idx.Add(pod("ml", "ready", true))
	p := provider.New(provider.Config{Values: newSource(t, f), Pods: corelisters.NewPodLister(idx)})
	info := cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Resource: "pods"}, Namespaced: true, Metric: provider.QueueDepth}
	f.setReply(func(string) (int, string) { return 503, "down" })
	_, err := p.GetMetricBySelector(context.Background(), "ml", labels.Everything(), info, labels.Everything())
	if err == nil || apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "query prometheus at "+f.URL) {
		t.Fatalf("err = %v, want an error naming prometheus", err)
	}
	f.setReply(func(string) (int, string) { return 200, vector(t0, series{podLabels("ready"), "2"}) })
	if list, err := p.GetMetricBySelector(context.Background(), "ml", labels.Everything(), info, labels.Everything()); err != nil || len(list.Items) != 1 {
		t.Fatalf("after recovery: %+v, %v", list, err)
	}
}
