package scaledown

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corev1listers "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuscale/gpuscale/internal/harness/kubefake"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/adapter/storesource"
	"github.com/gpuscale/gpuscale/pkg/signal"
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
	w := newChurnWorld(b, qps, burst)
	// The first reconcile sets every cost; the benchmark is the steady state.
	w.churn()
	w.ctrl.Reconcile(context.Background())
	ctx := context.Background()
	var patched, wanted, deferred int
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		w.churn()
		b.StartTimer()
		res := w.ctrl.Reconcile(ctx)
		patched += res.Patched
		wanted += res.Wanted
		deferred += res.RateLimited
	}
	b.ReportMetric(float64(patched)/float64(b.N), "patches/op")
	b.ReportMetric(float64(wanted)/float64(b.N), "wanted/op")
	b.ReportMetric(float64(deferred)/float64(b.N), "deferred/op")
}

const churnNodes, churnPerNode, churnMaxLoad = 125, 8, 16

// churnWorld is the benchmark's cluster: listers over indexers, a fake
// clientset whose patches land in the pod indexer at once, a store and a
// fake clock.
type churnWorld struct {
	ctrl  *Controller
	clk   *clocktesting.FakeClock
	st    *store.Store
	rng   *rand.Rand
	keys  []store.Key
	loads []float64
}

func newChurnWorld(b *testing.B, qps float64, burst int) *churnWorld {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	nodeIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	client := kubefake.NewClientset()
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
	w := &churnWorld{clk: clocktesting.NewFakeClock(t0), st: store.New(4), rng: rand.New(rand.NewPCG(1, 2))}
	for n := range churnNodes {
		name := fmt.Sprintf("gpu-%03d", n)
		_ = nodeIdx.Add(gpuNode(name, churnPerNode))
		for i := range churnPerNode {
			p := pod("ns", fmt.Sprintf("%s-%d", name, i), name, 1, true)
			_ = idx.Add(p)
			w.keys = append(w.keys, store.Key{Namespace: p.Namespace, Name: p.Name})
			w.loads = append(w.loads, float64(w.rng.IntN(9)))
		}
	}
	ctrl, err := New(Config{Client: client, Pods: corev1listers.NewPodLister(idx), Nodes: corev1listers.NewNodeLister(nodeIdx),
		Loads: storesource.New(w.st, 3*time.Second, time.Minute, w.clk.Now), Clock: w.clk, PatchQPS: qps, PatchBurst: burst})
	if err != nil {
		b.Fatal(err)
	}
	w.ctrl = ctrl
	return w
}

// churn advances one second and gives every pod a new load.
func (w *churnWorld) churn() {
	w.clk.Step(time.Second)
	for i, k := range w.keys {
		w.loads[i] = min(churnMaxLoad, max(0, w.loads[i]+float64(w.rng.IntN(5)-2)))
		var s store.Sample
		s.Time = w.clk.Now()
		s.Set(signal.QueueDepth, w.loads[i]/2)
		s.Set(signal.RequestsRunning, w.loads[i]-w.loads[i]/2)
		w.st.PutPod(k, signal.SourceInference, s)
	}
}
