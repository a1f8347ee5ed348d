package provider_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/gpuscale/gpuscale/internal/harness/cpumeter"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/capacity"
)

// manyDeployments fills f with n Deployments of one Ready pod each in
// namespace ml, as an HPA per Deployment sees them: each pod carries its
// Deployment's app label, a pod-template-hash and a label all of them
// share, and has fresh running, queue and KV cache samples.
func manyDeployments(f *fixture, n int) (names []string) {
	for i := range n {
		name := fmt.Sprintf("llm-%04d", i)
		sel := map[string]string{"app": name}
		_ = f.deploys.Add(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}}})
		pod := name + "-7d9f8c6b5-x2x2x"
		f.addPod("ml", pod, true, map[string]string{"app": name, "pod-template-hash": "7d9f8c6b5", "tier": "serving"})
		f.put("ml", pod, signal.SourceInference, t0.Add(-time.Second), "m",
			map[signal.Signal]float64{signal.RequestsRunning: 3, signal.QueueDepth: float64(i % 5), signal.KVCacheUtilization: 40}, nil)
		names = append(names, name)
	}
	return names
}

func deploymentsInfo(metric string) cmprovider.CustomMetricInfo {
	return cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Group: "apps", Resource: "deployments"}, Namespaced: true, Metric: metric}
}

// BenchmarkObjectReadManyDeployments is the HPA's Object read of one
// Deployment among 1,000 of one pod each in one namespace (#28): each
// iteration reads the next Deployment's capacity utilization or queue
// depth, round robin, as 1,000 HPAs at one sync period do.
func BenchmarkObjectReadManyDeployments(b *testing.B) {
	for _, metric := range []string{provider.CapacityUtilization, provider.QueueDepth} {
		b.Run(metric, func(b *testing.B) {
			f := newFixture()
			// The estimator keeps 256 workloads of a namespace by
			// default (capacity.DefaultMaxTargetsPerNamespace): past
			// them, reads fail, which is not the path measured here.
			cfg := capacity.DefaultConfig()
			cfg.MaxTargetsPerNamespace = 1000
			f.p.SetCapacity(capacity.New(cfg, capacity.NewMetrics()))
			names := manyDeployments(f, 1000)
			info := deploymentsInfo(metric)
			b.ReportAllocs()
			cpu := cpumeter.Start(b)
			for n := 0; n < b.N; n++ {
				name := types.NamespacedName{Namespace: "ml", Name: names[n%len(names)]}
				if _, err := f.p.GetMetricByName(context.Background(), name, info, labels.Everything()); err != nil {
					b.Fatal(err)
				}
			}
			cpu.Report(b)
		})
	}
}

// BenchmarkPodsListManyDeployments is the HPA's Pods-metric call (queue
// depth of the pods a Deployment's selector matches) among 1,000
// Deployments of one pod each in one namespace, round robin.
func BenchmarkPodsListManyDeployments(b *testing.B) {
	f := newFixture()
	names := manyDeployments(f, 1000)
	sels := make([]labels.Selector, len(names))
	for i, n := range names {
		s, err := labels.Parse("app=" + n) // as the API server parses the HPA's query
		if err != nil {
			b.Fatal(err)
		}
		sels[i] = s
	}
	b.ReportAllocs()
	cpu := cpumeter.Start(b)
	for n := 0; n < b.N; n++ {
		list, err := f.p.GetMetricBySelector(context.Background(), "ml", sels[n%len(sels)], podsInfo(provider.QueueDepth), labels.Everything())
		if err != nil || len(list.Items) != 1 {
			b.Fatalf("%v items, err %v", list, err)
		}
	}
	cpu.Report(b)
}
