//go:build linux && cgo

package nvml

import (
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// TestBackendReadsEveryField walks gpu.Specs: a GPU that has everything
// (a licensed vGPU guest on NVLink, with GPM and XID events) must have
// every field read, from its second collection on (GPM metrics and the
// NVLink throughput are deltas). A field added to the table without its
// NVML read fails here, by name; so does one whose read the mock cannot
// answer until the fixture answers it.
func TestBackendReadsEveryField(t *testing.T) {
	g := healthyGPU(0)
	g.virtMode, g.licensed = gonvml.GPU_VIRTUALIZATION_MODE_VGPU, true
	g.nvlink = true
	f := newFixture(g)
	fg := &fakeGPM{counter: map[int]float64{-1: 0}}
	fg.install(f, f.devices[0], true)
	b := newBackend(t, f, Options{XIDEvents: true, Profiling: true})
	collect(t, b)
	fg.counter[-1] += 0.5
	g.nvlinkTxKiB, g.nvlinkRxKiB = 1024, 2048
	rs := collect(t, b)
	if len(rs) != 1 || rs[0].Err != nil {
		t.Fatalf("readings %+v", rs)
	}
	for _, spec := range gpu.Specs {
		if _, ok := rs[0].Get(spec.Field); !ok {
			t.Errorf("field %s (%v) is not read by the NVML backend: add its call (fields.go, gpm.go or events.go) or teach the fixture to answer it", spec.Name, spec.DCGM[0].Name48)
		}
	}
	for _, fe := range rs[0].FieldErrors {
		t.Errorf("field %s failed: %s", fe.Field, fe.Code)
	}
}
