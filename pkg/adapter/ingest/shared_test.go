package ingest

import (
	"testing"

	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

func TestGPUSharedUsesEachPodsShare(t *testing.T) {
	p3 := store.Key{Namespace: "ml", Name: "p3"}
	marker := "gpuscale_gpu_shared{gpu=\"0\",UUID=\"GPU-a\",GPU_I_ID=\"\"} 1\n"
	shares := dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-a", "p1", "30") +
		dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-a", "p3", "15") +
		dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-a", "", "5")
	tests := []struct {
		name                  string
		text                  string
		wantP1, wantP3, wantN float64
		wantRejected          int
	}{
		{"shares: each pod its own, the node their sum", marker + shares, 30, 15, 50, 0},
		{"dcgm-exporter's copies: every pod the device's value",
			dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-a", "p1", "50") + dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-a", "p3", "50"),
			50, 50, 50, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods, node, rejected, err := GPU(parse(t, tt.text))
			if err != nil {
				t.Fatal(err)
			}
			for k, want := range map[store.Key]float64{p1: tt.wantP1, p3: tt.wantP3} {
				s := pods[k]
				if got, ok := s.Get(signal.GPUUtilization); !ok || got != want {
					t.Errorf("%s: gpu_utilization = %v (%v), want %v", k.Name, got, ok, want)
				}
			}
			if got, ok := node.Get(signal.GPUUtilization); !ok || got != tt.wantN {
				t.Errorf("node gpu_utilization = %v (%v), want %v", got, ok, tt.wantN)
			}
			if len(rejected) != tt.wantRejected {
				t.Errorf("rejected %v", rejected)
			}
		})
	}
}

func TestGPUSharesPastTheDeviceAreRejected(t *testing.T) {
	text := "gpuscale_gpu_shared{gpu=\"0\",UUID=\"GPU-a\",GPU_I_ID=\"\"} 1\n" +
		dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-a", "p1", "80") +
		dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-a", "p2", "70")
	pods, node, rejected, err := GPU(parse(t, text))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := node.Get(signal.GPUUtilization); ok {
		t.Error("node utilization served from shares adding up to 150%")
	}
	if s := pods[p1]; func() bool { _, ok := s.Get(signal.GPUUtilization); return ok }() {
		t.Error("a pod's share served from shares adding up to 150%")
	}
	if len(rejected) != 1 || rejected[0].Reason != ReasonOutOfRange {
		t.Errorf("rejected = %+v, want one out of range", rejected)
	}
}
