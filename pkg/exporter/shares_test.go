package exporter

import (
	"context"
	"testing"

	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/metrics"
)

// fakeProcessPods names processes' pods from a table; a missing pid is in
// no pod.
type fakeProcessPods map[uint32]metrics.PodRef

func (f fakeProcessPods) PodOf(pid uint32) (metrics.PodRef, string) {
	ref, ok := f[pid]
	if !ok {
		return metrics.PodRef{}, ReasonNotInPod
	}
	return ref, ""
}

func proc(pid uint32, util, memMiB float64) gpu.Process {
	return gpu.Process{PID: pid, SMUtil: util, HasUtil: true, UsedMemoryMiB: memMiB, HasMemory: true}
}

func TestSharesOnATimeSlicedGPU(t *testing.T) {
	a := metrics.PodRef{Namespace: "team-a", Pod: "nb-a", Container: "jupyter"}
	b := metrics.PodRef{Namespace: "team-b", Pod: "nb-b", Container: "jupyter"}
	c := metrics.PodRef{Namespace: "team-c", Pod: "nb-c", Container: "jupyter"}
	intruder := metrics.PodRef{Namespace: "evil", Pod: "x", Container: "x"}

	tests := []struct {
		name  string
		procs []gpu.Process
		// want is GPU_UTIL and FB_USED by pod name ("" for no pod).
		wantUtil, wantMem map[string]float64
		wantShared        bool
		wantFailures      map[string]float64
	}{{
		name:       "each pod its own processes; a holder without processes gets 0",
		procs:      []gpu.Process{proc(1, 30, 2000), proc(2, 15, 1000), proc(3, 5, 500)},
		wantUtil:   map[string]float64{"nb-a": 45, "nb-b": 5, "nb-c": 0},
		wantMem:    map[string]float64{"nb-a": 3000, "nb-b": 500, "nb-c": 0},
		wantShared: true,
	}, {
		name:         "a process in no pod and one whose pod does not hold the GPU go to no pod",
		procs:        []gpu.Process{proc(1, 30, 2000), proc(9, 10, 100), proc(7, 5, 50)},
		wantUtil:     map[string]float64{"nb-a": 30, "nb-b": 0, "nb-c": 0, "": 15},
		wantMem:      map[string]float64{"nb-a": 2000, "nb-b": 0, "nb-c": 0, "": 150},
		wantShared:   true,
		wantFailures: map[string]float64{ReasonNotInPod: 1, ReasonNotAssigned: 1},
	}, {
		name:     "no utilization samples: the device's value, no marker",
		procs:    []gpu.Process{{PID: 1, UsedMemoryMiB: 2000, HasMemory: true}},
		wantUtil: map[string]float64{"nb-a": 50, "nb-b": 50, "nb-c": 50},
		wantMem:  map[string]float64{"nb-a": 2000, "nb-b": 0, "nb-c": 0},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := reading(0, 50)
			r.Processes = tt.procs
			fb := &fakeBackend{readings: []gpu.Reading{r}}
			pods := fakePods{"GPU-a": {a, b, c}}
			col, _, reg := newTestCollector(t, fb, pods)
			col.cfg.Processes = fakeProcessPods{1: a, 2: a, 3: b, 7: intruder}
			if err := col.CollectOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			for family, want := range map[string]map[string]float64{
				"DCGM_FI_DEV_GPU_UTIL": tt.wantUtil, "DCGM_FI_DEV_FB_USED": tt.wantMem,
			} {
				got := series(t, reg, family, "pod")
				if len(got) != len(want) {
					t.Errorf("%s: pods %v, want %v", family, got, want)
				}
				for pod, v := range want {
					if len(got[pod]) != 1 || got[pod][0].GetGauge().GetValue() != v {
						t.Errorf("%s{pod=%q} = %v, want %v", family, pod, got[pod], v)
					}
				}
			}
			if marked := len(series(t, reg, "gpuscale_gpu_shared", "UUID")["GPU-a"]) == 1; marked != tt.wantShared {
				t.Errorf("gpuscale_gpu_shared present = %v, want %v", marked, tt.wantShared)
			}
			for reason, n := range tt.wantFailures {
				s := series(t, reg, "gpuscale_exporter_process_attribution_failures_total", "reason")[reason]
				if len(s) != 1 || s[0].GetCounter().GetValue() != n {
					t.Errorf("attribution failures{reason=%q} = %v, want %v", reason, s, n)
				}
			}
		})
	}
}

func TestSharesOnlyOnSharedGPUs(t *testing.T) {
	r := reading(0, 50)
	r.Processes = []gpu.Process{proc(1, 40, 2000)}
	a := metrics.PodRef{Namespace: "llm", Pod: "vllm-0", Container: "vllm"}
	col, _, reg := newTestCollector(t, &fakeBackend{readings: []gpu.Reading{r}}, fakePods{"GPU-a": {a}})
	col.cfg.Processes = fakeProcessPods{1: a}
	if err := col.CollectOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A GPU held by one pod is served as dcgm-exporter serves it.
	if got := series(t, reg, "DCGM_FI_DEV_GPU_UTIL", "pod")["vllm-0"]; len(got) != 1 || got[0].GetGauge().GetValue() != 50 {
		t.Errorf("GPU_UTIL of the exclusive GPU = %v, want the device's 50", got)
	}
}
