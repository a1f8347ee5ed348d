package app

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// vLLM's TTFT bucket layout. Each sample gets its own copy, as each scrape
// parses one.
var vllmBounds = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
	2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0, math.Inf(1)}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkMemory10kPods measures what the adapter holds for 10,000 pods:
// the slimmed pod informer cache plus a full window (what the default
// --ttft-window needs, at the default 5s scrape interval) of GPU and
// inference samples (4 GPU signals, 3 inference gauges and a 22-bucket
// TTFT histogram behind the 3 TTFT quantiles). Reported as heap-MiB.
func BenchmarkMemory10kPods(b *testing.B) {
	const pods = 10000
	o := NewOptions()
	o.Complete()
	for i := 0; i < b.N; i++ {
		base := heapInUse()
		idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		st := o.newStore()
		t0 := time.Now()
		slimPod := o.podTransform()
		for p := 0; p < pods; p++ {
			slim, _ := slimPod(realisticPod(p))
			_ = idx.Add(slim)
			k := store.Key{Namespace: "ml", Name: fmt.Sprintf("llm-%05d", p)}
			for s := 0; s < o.samplesKept(); s++ {
				at := t0.Add(time.Duration(s) * o.ScrapeInterval)
				var g, inf store.Sample
				g.Time, inf.Time, inf.Model = at, at, "meta-llama/Llama-3.1-8B-Instruct"
				for sig := signal.GPUUtilization; sig <= signal.GPUPowerWatts; sig++ {
					g.Set(sig, float64(s))
				}
				for sig := signal.QueueDepth; sig <= signal.KVCacheUtilization; sig++ {
					inf.Set(sig, float64(s))
				}
				h := &histogram.Histogram{Bounds: slices.Clone(vllmBounds), Counts: make([]float64, len(vllmBounds)), Count: float64(s), Sum: float64(s)}
				inf.TTFT = h
				st.PutPod(k, signal.SourceGPU, g)
				st.PutPod(k, signal.SourceInference, inf)
			}
		}
		used := heapInUse() - base
		b.ReportMetric(float64(used)/(1<<20), "heap-MiB")
		runtime.KeepAlive(idx)
		runtime.KeepAlive(st)
	}
}

// realisticPod is a vLLM pod as the API server returns it: managed
// fields, a last-applied annotation, a full container spec and status.
func realisticPod(i int) *corev1.Pod {
	name := fmt.Sprintf("llm-%05d", i)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("uid-" + name), ResourceVersion: "123456",
			Labels:          map[string]string{"app": "llm", "pod-template-hash": "5d8f7c9b6"},
			Annotations:     map[string]string{"gpuscale.io/scrape": "true", "gpuscale.io/port": "8000", "kubectl.kubernetes.io/restartedAt": "2026-11-30T10:00:00Z"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "llm-5d8f7c9b6", UID: "rs"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: "Update"}, {Manager: "kubelet", Operation: "Update", Subresource: "status"}}},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("gpu-node-%03d", i/8), Containers: []corev1.Container{{
			Name: "vllm", Image: "vllm/vllm-openai:v0.11.0", Args: []string{"--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu-memory-utilization", "0.9"},
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}},
			Env:   []corev1.EnvVar{{Name: "HF_HOME", Value: "/models"}, {Name: "VLLM_LOGGING_LEVEL", Value: "INFO"}},
		}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.2.3", HostIP: "10.0.0.1",
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.PodScheduled, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "vllm", Ready: true, Image: "vllm/vllm-openai:v0.11.0", ImageID: "sha256:abc"}}},
	}
}
