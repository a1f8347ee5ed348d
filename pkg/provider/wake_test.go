package provider_test

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

func (f *fixture) putRouter(ns, name string, at time.Time, held map[string]float64) {
	f.store.PutRouter(store.Key{Namespace: ns, Name: name}, store.RouterSample{Time: at, Held: held})
}

func (f *fixture) externalQueue(model string) (float64, error) {
	sel := labels.SelectorFromSet(labels.Set{provider.ModelLabel: model})
	list, err := f.p.GetExternalMetric(context.Background(), "ml", sel, cmprovider.ExternalMetricInfo{Metric: provider.QueueDepth})
	if err != nil {
		return 0, err
	}
	if len(list.Items) != 1 {
		return 0, nil
	}
	return float64(list.Items[0].Value.MilliValue()) / 1000, nil
}

// TestExternalQueueAtZeroServers is the contract a scale-from-zero HPA or
// KEDA trigger relies on: the per-model queue depth includes what routers
// hold for the model, has a value when the model has no server but a
// fresh router names it, and is NotFound, never a made-up zero, when the
// only router's scrape is stale or none names the model.
func TestExternalQueueAtZeroServers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		setup    func(f *fixture)
		model    string
		want     float64
		notFound bool
	}{
		{"a router holds requests for a model with no server", func(f *fixture) {
			f.addPod("ml", "epp", true, nil)
			f.putRouter("ml", "epp", t0, map[string]float64{"llama": 3, "qwen": 1})
		}, "llama", 3, false},
		{"a fresh router naming the model with nothing held is a zero", func(f *fixture) {
			f.addPod("ml", "epp", true, nil)
			f.putRouter("ml", "epp", t0, map[string]float64{"llama": 0})
		}, "llama", 0, false},
		{"routers add up, and add to the servers' queues", func(f *fixture) {
			f.addPod("ml", "epp", true, nil)
			f.addPod("ml", "dynamo", true, nil)
			f.addPod("ml", "server", true, nil)
			f.putRouter("ml", "epp", t0, map[string]float64{"llama": 2})
			f.putRouter("ml", "dynamo", t0, map[string]float64{"llama": 1})
			f.put("ml", "server", signal.SourceInference, t0, "llama", map[signal.Signal]float64{signal.QueueDepth: 4}, nil)
		}, "llama", 7, false},
		{"a stale router is no value, not a fresh zero", func(f *fixture) {
			f.addPod("ml", "epp", true, nil)
			f.putRouter("ml", "epp", t0.Add(-time.Minute), map[string]float64{"llama": 0})
		}, "llama", 0, true},
		{"a stale router holding requests drops out beside a fresh one", func(f *fixture) {
			f.addPod("ml", "epp", true, nil)
			f.addPod("ml", "epp-old", true, nil)
			f.putRouter("ml", "epp", t0, map[string]float64{"llama": 1})
			f.putRouter("ml", "epp-old", t0.Add(-time.Minute), map[string]float64{"llama": 9})
		}, "llama", 1, false},
		{"a router that does not name the model says nothing of it", func(f *fixture) {
			f.addPod("ml", "epp", true, nil)
			f.putRouter("ml", "epp", t0, map[string]float64{"qwen": 2})
		}, "llama", 0, true},
		{"a router pod that is not Ready is not read", func(f *fixture) {
			f.addPod("ml", "epp", false, nil)
			f.putRouter("ml", "epp", t0, map[string]float64{"llama": 2})
		}, "llama", 0, true},
		{"another namespace's router is not read", func(f *fixture) {
			f.addPod("other", "epp", true, nil)
			f.putRouter("other", "epp", t0, map[string]float64{"llama": 2})
		}, "llama", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			tc.setup(f)
			got, err := f.externalQueue(tc.model)
			if tc.notFound {
				if !apierrors.IsNotFound(err) {
					t.Fatalf("got %v, %v; want NotFound", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// Routers hold requests only: what they hold is queue depth, never
// running requests, KV cache or TTFT.
func TestRoutersCountOnlyAsQueueDepth(t *testing.T) {
	f := newFixture()
	f.addPod("ml", "epp", true, nil)
	f.putRouter("ml", "epp", t0, map[string]float64{"llama": 3})
	sel := labels.SelectorFromSet(labels.Set{provider.ModelLabel: "llama"})
	for _, m := range []string{provider.RequestsRunning, provider.TTFTP90} {
		if _, err := f.p.GetExternalMetric(context.Background(), "ml", sel, cmprovider.ExternalMetricInfo{Metric: m}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: %v, want NotFound", m, err)
		}
	}
}

// A Deployment at zero replicas is woken through its Object metric when
// the HPA's metric selector names the model: the value is the model's
// queue over the namespace, routers included. Without a model selector,
// or with no fresh value for the model, it stays NotFound.
func TestObjectQueueAtZeroReplicas(t *testing.T) {
	f := newFixture()
	match := map[string]string{"app": "llm"}
	_ = f.deploys.Add(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "llm"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: match}}})
	f.addPod("ml", "llm-starting", false, match) // scheduled, still loading
	f.addPod("ml", "epp", true, nil)
	f.putRouter("ml", "epp", t0, map[string]float64{"llama": 2})
	info := cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Group: "apps", Resource: "deployments"}, Namespaced: true, Metric: provider.QueueDepth}
	name := types.NamespacedName{Namespace: "ml", Name: "llm"}
	llama := labels.SelectorFromSet(labels.Set{provider.ModelLabel: "llama"})

	mv, err := f.p.GetMetricByName(context.Background(), name, info, llama)
	if err != nil {
		t.Fatal(err)
	}
	if milli(t, &mv.Value) != 2 || mv.DescribedObject.Kind != "Deployment" || mv.DescribedObject.Name != "llm" {
		t.Fatalf("got %+v", mv)
	}
	for _, tc := range []struct {
		name string
		sel  labels.Selector
		now  time.Time
	}{
		{"no model selector", labels.Everything(), t0},
		{"another model", labels.SelectorFromSet(labels.Set{provider.ModelLabel: "qwen"}), t0},
		{"the router's scrape gone stale", llama, t0.Add(time.Minute)},
	} {
		f.now = tc.now
		if _, err := f.p.GetMetricByName(context.Background(), name, info, tc.sel); !apierrors.IsNotFound(err) {
			t.Errorf("%s: %v, want NotFound", tc.name, err)
		}
	}
}
