package simworld

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuscale/gpuscale/internal/harness/kubefake"
)

// BenchmarkAssignGPUs is one node's steady state: 8 GPUs held by 8 pods
// among 100, the rest asking for none.
func BenchmarkAssignGPUs(b *testing.B) {
	var reqs []gpuRequest
	for i := range 8 {
		reqs = append(reqs, gpuRequest{
			Pod:        podKey{Namespace: "ns", Name: fmt.Sprint("gpu-", i)},
			Created:    time.Unix(int64(i), 0),
			Containers: []containerRequest{{Name: "c", GPUs: 1}},
		})
	}
	prev := assignGPUs(nil, reqs, 8)
	b.ReportAllocs()
	for b.Loop() {
		prev = assignGPUs(prev, reqs, 8)
	}
}

// BenchmarkPodResourcesList is the work behind one exporter's List call on
// a node with 8 GPU pods and 92 others.
func BenchmarkPodResourcesList(b *testing.B) {
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{nodeIndex: byNode})
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := nodes.Add(node("n", 8)); err != nil {
		b.Fatal(err)
	}
	for i := range 100 {
		var opts []podOpt
		if i < 8 {
			opts = append(opts, withGPUs(1))
		}
		if err := pods.Add(pod("ns", fmt.Sprint("p-", i), "n", "127.0.0.1", InferenceImage, opts...)); err != nil {
			b.Fatal(err)
		}
	}
	w, err := New(Options{Client: kubefake.NewClientset(), Dir: b.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	w.pods, w.nodes, w.podIndex = corev1listers.NewPodLister(pods), corev1listers.NewNodeLister(nodes), pods
	if got := w.podResources("n"); len(got) != 100 {
		b.Fatalf("List returned %d pods, want 100", len(got))
	}
	b.ReportAllocs()
	for b.Loop() {
		w.podResources("n")
	}
}
