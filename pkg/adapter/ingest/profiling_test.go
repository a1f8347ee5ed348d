package ingest

import (
	"testing"

	"github.com/gpuscale/gpuscale/pkg/signal"
)

func TestGPUProfilingSignals(t *testing.T) {
	text := dcgmSeries("DCGM_FI_PROF_SM_ACTIVE", "GPU-a", "p1", "0.5") +
		dcgmSeries("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "GPU-a", "p1", "0.25") +
		dcgmSeries("DCGM_FI_PROF_SM_ACTIVE", "GPU-b", "p1", "0.75") +
		dcgmSeries("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "GPU-b", "p1", "0.5") +
		// GPU-c predates GPM: no profiling fields, only utilization.
		dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-c", "p2", "10")
	pods, node, rejected, err := GPU(parse(t, text))
	if err != nil || len(rejected) != 0 {
		t.Fatalf("GPU = %v, rejected %v", err, rejected)
	}
	p := pods[p1]
	for sig, want := range map[signal.Signal]float64{signal.GPUSMActive: 62.5, signal.GPUTensorActive: 37.5} {
		if got, ok := p.Get(sig); !ok || got != want {
			t.Errorf("p1 %s = %v (%v), want %v", sig, got, ok, want)
		}
		if got, ok := node.Get(sig); !ok || got != want {
			t.Errorf("node %s = %v (%v), want %v: the mean over the GPUs that report it", sig, got, ok, want)
		}
	}
	q := pods[p2]
	if _, ok := q.Get(signal.GPUSMActive); ok {
		t.Error("a GPU without profiling gave its pod an SM activity")
	}
}

func TestGPUProfilingOutOfRange(t *testing.T) {
	// A ratio past 1 (a percent served where a ratio belongs, or a lie).
	text := dcgmSeries("DCGM_FI_PROF_SM_ACTIVE", "GPU-a", "p1", "37") +
		dcgmSeries("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "GPU-a", "p1", "0.25")
	pods, _, rejected, err := GPU(parse(t, text))
	if err != nil {
		t.Fatal(err)
	}
	p := pods[p1]
	if _, ok := p.Get(signal.GPUSMActive); ok || len(rejected) != 1 || rejected[0].Reason != ReasonOutOfRange {
		t.Errorf("SM activity 3700%% served or not rejected: rejected %+v", rejected)
	}
	if got, ok := p.Get(signal.GPUTensorActive); !ok || got != 25 {
		t.Errorf("tensor activity = %v (%v), want 25 beside the rejected field", got, ok)
	}
}
