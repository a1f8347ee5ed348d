package provider_test

import (
	"context"
	"math"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// servedOK fails unless an answer's quantity says v, to the milli-unit:
// the HPA reads MilliValue.
func servedOK(t *testing.T, what string, q interface{ MilliValue() int64 }, v float64) {
	t.Helper()
	if got := float64(q.MilliValue()) / 1000; math.Abs(got-v) > 0.0005 {
		t.Errorf("%s: served %v (MilliValue %d), the value is %g", what, q, q.MilliValue(), v)
	}
}

// TestOutOfRangeNeverServed: values a hostile target reports out of their
// signal's range never reach an HPA, whichever API call asks, while the
// good pod beside them is served.
func TestOutOfRangeNeverServed(t *testing.T) {
	tests := []struct {
		name   string
		metric string
		sig    signal.Signal
		src    signal.Source
		v      float64
	}{
		{"queue of 1e16", provider.QueueDepth, signal.QueueDepth, signal.SourceInference, 1e16},
		{"utilization 1e300", provider.GPUUtilization, signal.GPUUtilization, signal.SourceGPU, 1e300},
		{"utilization +Inf", provider.GPUUtilization, signal.GPUUtilization, signal.SourceGPU, math.Inf(+1)},
		{"negative running", provider.RequestsRunning, signal.RequestsRunning, signal.SourceInference, -4},
		{"KV cache 1e300", provider.KVCacheUtilization, signal.KVCacheUtilization, signal.SourceInference, 1e300},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture()
			f.addPod("ml", "good", true, map[string]string{"app": "llm"})
			f.addPod("ml", "bad", true, map[string]string{"app": "llm"})
			f.put("ml", "good", tt.src, t0, "m", map[signal.Signal]float64{tt.sig: 3}, nil)
			f.put("ml", "bad", tt.src, t0, "m", map[signal.Signal]float64{tt.sig: tt.v}, nil)

			list, err := f.p.GetMetricBySelector(context.Background(), "ml", labels.Everything(), podsInfo(tt.metric), labels.Everything())
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range list.Items {
				if it.DescribedObject.Name != "good" {
					t.Errorf("pod %s listed with %v", it.DescribedObject.Name, &it.Value)
				}
			}
			if len(list.Items) != 1 {
				t.Fatalf("%d items, want the good pod's", len(list.Items))
			}
			servedOK(t, "good pod", &list.Items[0].Value, 3)

			mv, err := f.p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "ml", Name: "bad"}, podsInfo(tt.metric), labels.Everything())
			if err == nil {
				t.Fatalf("bad pod served %v", &mv.Value)
			}
		})
	}
}

// fixedValues answers every question with one value, as a PromQL source
// reading a hostile target's series through Prometheus would.
type fixedValues struct{ v float64 }

func (s fixedValues) Pods(_ context.Context, pods *provider.PodSet, _ provider.Metric, _ labels.Selector) ([]provider.Value, error) {
	out := make([]provider.Value, len(pods.Pods))
	for i := range out {
		out[i] = provider.Value{V: s.v, Time: t0}
	}
	return out, nil
}

func (s fixedValues) Workload(context.Context, string, []*corev1.Pod, provider.Metric, labels.Selector) (provider.Value, bool, error) {
	return provider.Value{V: s.v, Time: t0}, true, nil
}

func (s fixedValues) Nodes(_ context.Context, nodes []string, _ provider.Metric) (map[string]provider.Value, error) {
	out := map[string]provider.Value{}
	for _, n := range nodes {
		out[n] = provider.Value{V: s.v, Time: t0}
	}
	return out, nil
}

func (s fixedValues) Models(context.Context, string, []*corev1.Pod, provider.Metric, labels.Selector) (map[string]provider.Value, error) {
	return map[string]provider.Value{"m": {V: s.v, Time: t0}}, nil
}

// TestOverflowingAggregateIsAnError: a workload's or a model's value that
// leaves what its pods can add up to, or what a quantity holds, fails the
// request (the HPA keeps its replicas) instead of being served as
// -9223372036854775808m, which scales an HPA to its minimum.
func TestOverflowingAggregateIsAnError(t *testing.T) {
	deployment := func(f *fixture, pods ...string) {
		sel := map[string]string{"app": "llm"}
		_ = f.deploys.Add(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "llm"},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}}})
		for _, p := range pods {
			f.addPod("ml", p, true, sel)
		}
	}
	deploymentInfo := func(m string) cmprovider.CustomMetricInfo {
		return cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Group: "apps", Resource: "deployments"}, Namespaced: true, Metric: m}
	}
	getDeployment := func(f *fixture, m string) error {
		mv, err := f.p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "ml", Name: "llm"}, deploymentInfo(m), labels.Everything())
		if err == nil {
			t.Errorf("%s served as %v (MilliValue %d)", m, &mv.Value, mv.Value.MilliValue())
		}
		return err
	}

	t.Run("store: framebuffer summed over pods", func(t *testing.T) {
		f := newFixture()
		deployment(f, "a", "b", "c")
		// Each pod at the most a pod can hold (1,024 devices of 4 TiB):
		// their sum, 1.35e16 bytes, is no quantity an HPA can read in
		// milli-units.
		for _, p := range []string{"a", "b", "c"} {
			f.put("ml", p, signal.SourceGPU, t0, "", map[signal.Signal]float64{signal.GPUMemoryUsedBytes: 1 << 52}, nil)
		}
		err := getDeployment(f, provider.GPUMemoryUsedBytes)
		if !apierrors.IsInternalError(err) {
			t.Fatalf("err = %v, want an InternalError", err)
		}
		if f.obs.calls["custom/"+provider.GPUMemoryUsedBytes+"/deployments.apps/error"] != 1 {
			t.Errorf("observer calls = %v, want the request counted as an error", f.obs.calls)
		}
		// One pod alone is served exactly.
		mv, err := f.p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "ml", Name: "a"}, podsInfo(provider.GPUMemoryUsedBytes), labels.Everything())
		if err != nil {
			t.Fatal(err)
		}
		if got := mv.Value.Value(); got != 1<<52 {
			t.Errorf("pod a = %d bytes, want %d", got, int64(1<<52))
		}
	})

	for _, tt := range []struct {
		name, metric string
		v            float64
	}{
		{"source: queue past a quantity", provider.QueueDepth, 1e16},
		{"source: queue past what two servers hold", provider.QueueDepth, 3 << 30},
		{"source: mean utilization above 100", provider.GPUUtilization, 100.5},
		{"source: TTFT of 1e300 s", provider.TTFTP90, 1e300},
		{"source: NaN", provider.QueueDepth, math.NaN()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture()
			deployment(f, "a", "b")
			f.p.SetValues(fixedValues{tt.v})
			if err := getDeployment(f, tt.metric); err != nil && apierrors.IsNotFound(err) {
				t.Errorf("err = %v, want an error that is not NotFound", err)
			}
			if tt.metric != provider.QueueDepth {
				return
			}
			ext, err := f.p.GetExternalMetric(context.Background(), "ml", labels.Everything(), cmprovider.ExternalMetricInfo{Metric: provider.QueueDepth})
			if err == nil {
				t.Errorf("external: served %v", &ext.Items[0].Value)
			} else if apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "model m") {
				t.Errorf("external: err = %v, want an error naming the model", err)
			}
			_, err = f.p.GetMetricBySelector(context.Background(), "ml", labels.Everything(), podsInfo(provider.QueueDepth), labels.Everything())
			if !apierrors.IsNotFound(err) {
				t.Errorf("pods list: err = %v, want NotFound: no pod has a value that can be served", err)
			}
		})
	}
}
