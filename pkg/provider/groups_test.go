package provider_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuscale/gpuscale/pkg/kube/podgroup"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// TestGroupSignals: an HPA on a LeaderWorkerSet lists its leaders (the
// scale subresource's selector). A leader's GPU signals are its group's:
// memory and power summed over the group's Ready pods, utilization
// averaged; its inference signals are its own endpoint's, which serves the
// group. A pod outside any group keeps its own values.
func TestGroupSignals(t *testing.T) {
	f := newFixture()
	member := func(group, worker int) map[string]string {
		return map[string]string{podgroup.SetLabel: "llm", podgroup.GroupIndexLabel: fmt.Sprint(group),
			podgroup.WorkerIndexLabel: fmt.Sprint(worker)}
	}
	at := t0.Add(-time.Second)
	gpu := func(name string, util, mem float64) {
		f.put("ml", name, signal.SourceGPU, at, "", map[signal.Signal]float64{signal.GPUUtilization: util, signal.GPUMemoryUsedBytes: mem}, nil)
	}
	// Group 0: a leader and two workers, one of them not Ready.
	f.addPod("ml", "llm-0", true, member(0, 0))
	f.addPod("ml", "llm-0-1", true, member(0, 1))
	f.addPod("ml", "llm-0-2", false, member(0, 2))
	gpu("llm-0", 90, 10e9)
	gpu("llm-0-1", 70, 30e9)
	gpu("llm-0-2", 0, 50e9)
	f.put("ml", "llm-0", signal.SourceInference, at, "m", map[signal.Signal]float64{signal.QueueDepth: 4}, nil)
	// Group 1: its worker has no GPU sample yet.
	f.addPod("ml", "llm-1", true, member(1, 0))
	f.addPod("ml", "llm-1-1", true, member(1, 1))
	gpu("llm-1", 50, 20e9)
	// Another set's group of the same index, and a pod of no group.
	f.addPod("ml", "other-1", true, map[string]string{podgroup.SetLabel: "other", podgroup.GroupIndexLabel: "1", podgroup.WorkerIndexLabel: "1"})
	gpu("other-1", 10, 99e9)
	f.addPod("ml", "solo", true, map[string]string{"app": "solo"})
	gpu("solo", 20, 5e9)

	leaders := labels.SelectorFromSet(labels.Set{podgroup.SetLabel: "llm", podgroup.WorkerIndexLabel: "0"})
	tests := []struct {
		metric string
		want   map[string]float64 // by leader
	}{
		{provider.GPUMemoryUsedBytes, map[string]float64{"llm-0": 40e9, "llm-1": 20e9}},
		{provider.GPUUtilization, map[string]float64{"llm-0": 80, "llm-1": 50}},
		{provider.QueueDepth, map[string]float64{"llm-0": 4}},
	}
	for _, tt := range tests {
		t.Run(tt.metric, func(t *testing.T) {
			list, err := f.p.GetMetricBySelector(context.Background(), "ml", leaders, podsInfo(tt.metric), labels.Everything())
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]float64{}
			for _, it := range list.Items {
				got[it.DescribedObject.Name] = milli(t, &it.Value)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("by selector: %v, want %v", got, tt.want)
			}
			for name, want := range tt.want {
				mv, err := f.p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "ml", Name: name}, podsInfo(tt.metric), labels.Everything())
				if err != nil || milli(t, &mv.Value) != want {
					t.Errorf("by name %s: %v, %v; want %v", name, mv, err, want)
				}
			}
		})
	}
	mv, err := f.p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "ml", Name: "solo"}, podsInfo(provider.GPUMemoryUsedBytes), labels.Everything())
	if err != nil || milli(t, &mv.Value) != 5e9 {
		t.Errorf("a pod of no group: %v, %v; want its own 5e9", mv, err)
	}
}
