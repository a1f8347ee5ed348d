package scaledown

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	corev1listers "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuscale/gpuscale/pkg/store"
)

// BenchmarkReconcileChurn1000: 1,000 managed one-GPU pods on 125 nodes of
// 8 GPUs whose load (queued + running requests, a random walk) changes
// every second (steps of -2..+2 between 0 and 16 requests in flight); one
// op is one second: new samples, then one reconcile.
// The API server is an indexer that applies each patch at once, as a
// caught-up informer would show it. Reported: patches/op (sent), wanted/op
// (pods whose annotations were out of date) and deferred/op (left by the
// rate limit for a later reconcile).
func BenchmarkReconcileChurn1000(b *testing.B) {
	for _, bc := range []struct {
		name  string
		qps   float64
		burst int
	}{{"limit=10qps", 10, 20}, {"unlimited", 1e9, 1e9}} {
		b.Run(bc.name, func(b *testing.B) { benchChurn(b, bc.qps, bc.burst) })
	}
}

func benchChurn(b *testing.B, qps float64, burst int) {
	const nodes, perNode, maxLoad = 125, 8, 16
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	nodeIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	client := fake.NewClientset()
	client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		obj, _, _ := idx.GetByKey(pa.GetNamespace() + "/" + pa.GetName())
		p := obj.(*corev1.Pod).DeepCopy()
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		for k, v := range mergePatchAnnotations(b, pa.GetPatch()) {
			if v == nil {
				delete(p.Annotations, k)
			} else {
				p.Annotations[k] = *v
			}
		}
		_ = idx.Update(p)
		return true, p, nil
	})
	rng := rand.New(rand.NewPCG(1, 2))
	loads := make([]float64, nodes*perNode)
	var keys []store.Key
	for n := range nodes {
		name := fmt.Sprintf("gpu-%03d", n)
		_ = nodeIdx.Add(gpuNode(name, perNode))
		for i := range perNode {
			p := pod("ns", fmt.Sprintf("%s-%d", name, i), name, 1, true)
			_ = idx.Add(p)
			keys = append(keys, store.Key{Namespace: p.Namespace, Name: p.Name})
			loads[len(keys)-1] = float64(rng.IntN(9))
		}
	}
	clk := clocktesting.NewFakeClock(t0)
	st := store.New(4)
	ctrl, err := New(Config{Client: client, Pods: corev1listers.NewPodLister(idx), Nodes: corev1listers.NewNodeLister(nodeIdx),
		Samples: st, MaxStaleness: 3 * time.Second, Clock: clk, PatchQPS: qps, PatchBurst: burst})
	if err != nil {
		b.Fatal(err)
	}
	churn := func() {
		clk.Step(time.Second)
		for i, k := range keys {
			loads[i] = min(maxLoad, max(0, loads[i]+float64(rng.IntN(5)-2)))
			var s store.Sample
			s.Time = clk.Now()
			s.Set(store.QueueDepth, loads[i]/2)
			s.Set(store.RequestsRunning, loads[i]-loads[i]/2)
			st.PutPod(k, store.SourceInference, s)
		}
	}
	// The first reconcile sets every cost; the benchmark is the steady state.
	churn()
	ctrl.Reconcile(context.Background())
	ctx := context.Background()
	var patched, wanted, deferred int
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		churn()
		b.StartTimer()
		res := ctrl.Reconcile(ctx)
		patched += res.Patched
		wanted += res.Wanted
		deferred += res.RateLimited
	}
	b.ReportMetric(float64(patched)/float64(b.N), "patches/op")
	b.ReportMetric(float64(wanted)/float64(b.N), "wanted/op")
	b.ReportMetric(float64(deferred)/float64(b.N), "deferred/op")
}
