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
	"github.com/gpuscale/gpuscale/pkg/signal/dialect"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// scraped is a cumulative histogram of bounds (and +Inf) as one scrape
// parses it, into its own slices: n requests, spread over the buckets.
func scraped(bounds []float64, n int) *histogram.Histogram {
	h := &histogram.Histogram{Bounds: append(slices.Clone(bounds), math.Inf(1)), Count: float64(n), Sum: float64(n) / 4}
	h.Counts = make([]float64, len(h.Bounds))
	for i := range h.Counts {
		h.Counts[i] = float64(n * (i + 1) / len(h.Counts))
	}
	return h
}

// heapInUse returns, after two collections, the heap's spans in use (what
// the process holds for the heap, fragmentation included) and the bytes of
// live objects in them.
func heapInUse() (spans, live uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse, m.HeapAlloc
}

// BenchmarkMemory10kPods measures what the adapter holds for 10,000 pods:
// the slimmed pod informer cache plus a full window (what the default
// --ttft-window needs, at the default 5s scrape interval) of GPU and
// inference samples: 4 GPU signals, 3 inference gauges, and vLLM's TTFT,
// inter-token latency and prefill-time histograms, each parsed afresh as a
// scrape parses it, its counts a few requests up at every scrape. Reported
// as heap-MiB (the heap's spans in use) and live-MiB (its live objects).
// The latency windows kept follow the reads (--latency-window-idle):
//   - capacity-only: no quantile read, each pod's newest histograms alone,
//     what an HPA on the capacity signal needs;
//   - ttft-read: the TTFT quantiles read (an HPA on inference_ttft_seconds_p90);
//   - all-kept: --latency-window-idle=0, both windows, as before windows
//     followed reads.
func BenchmarkMemory10kPods(b *testing.B) {
	cases := []struct {
		name  string
		idle  time.Duration
		reads []signal.Hist
	}{
		{"capacity-only", NewOptions().LatencyWindowIdle, nil},
		{"ttft-read", NewOptions().LatencyWindowIdle, []signal.Hist{signal.HistTTFT}},
		{"all-kept", 0, nil},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			o := NewOptions()
			o.LatencyWindowIdle = tc.idle
			o.Complete()
			for i := 0; i < b.N; i++ {
				baseSpans, baseLive := heapInUse()
				idx, st := fill10kPods(o, tc.reads)
				spans, live := heapInUse()
				b.ReportMetric(float64(spans-baseSpans)/(1<<20), "heap-MiB")
				b.ReportMetric(float64(live-baseLive)/(1<<20), "live-MiB")
				runtime.KeepAlive(idx)
				runtime.KeepAlive(st)
			}
		})
	}
}

// fill10kPods is BenchmarkMemory10kPods' informer cache and store, the
// quantiles of kinds read once before the first sample.
func fill10kPods(o *Options, reads []signal.Hist) (cache.Indexer, *store.Store) {
	const pods = 10000
	vllm, _ := dialect.Lookup(dialect.VLLM)
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	st := o.newStore()
	t0 := time.Now()
	for _, h := range reads {
		st.HistIncrease(store.Key{Namespace: "ml", Name: "llm-00000"}, h, t0, o.TTFTWindow, o.MaxStaleness)
	}
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
			inf.TTFT = scraped(vllm.Reads[dialect.TTFT].Buckets, s)
			inf.ITL = scraped(vllm.Reads[dialect.ITL].Buckets, 50*s)
			inf.Prefill = scraped(vllm.Reads[dialect.Prefill].Buckets, s)
			st.PutPod(k, signal.SourceGPU, g)
			st.PutPod(k, signal.SourceInference, inf)
		}
	}
	return idx, st
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
