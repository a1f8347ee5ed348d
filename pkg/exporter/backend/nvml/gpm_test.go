//go:build linux && cgo

package nvml

import (
	"sync/atomic"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// fakeGPM is a GPM that derives each metric from the two samples given:
// a sample records the device's cumulative activity counter when taken,
// and a metric is the counter's delta times a per-metric weight, as the
// real GPM computes rates from counter deltas.
type fakeGPM struct {
	counter   map[int]float64 // by GPU instance; -1 for the whole GPU
	allocated atomic.Int32
	freed     atomic.Int32
	// unsupported metrics answer ERROR_NOT_SUPPORTED.
	unsupported map[gonvml.GpmMetricId]bool
}

type gpmSample struct {
	mock.GpmSample
	value float64
	taken bool
}

// install wires the fake into f's library and GPU d.
func (g *fakeGPM) install(f *fixture, d *mock.Device, supported bool) {
	d.GpmQueryDeviceSupportFunc = func() (gonvml.GpmSupport, gonvml.Return) {
		s := gonvml.GpmSupport{IsSupportedDevice: 0}
		if supported {
			s.IsSupportedDevice = 1
		}
		return s, gonvml.SUCCESS
	}
	d.GpmSampleGetFunc = func(s gonvml.GpmSample) gonvml.Return {
		smp := s.(*gpmSample)
		smp.value, smp.taken = g.counter[-1], true
		return gonvml.SUCCESS
	}
	d.GpmMigSampleGetFunc = func(gi int, s gonvml.GpmSample) gonvml.Return {
		v, ok := g.counter[gi]
		if !ok {
			return gonvml.ERROR_NOT_FOUND
		}
		smp := s.(*gpmSample)
		smp.value, smp.taken = v, true
		return gonvml.SUCCESS
	}
	f.lib.GpmSampleAllocFunc = func() (gonvml.GpmSample, gonvml.Return) {
		g.allocated.Add(1)
		s := &gpmSample{}
		s.FreeFunc = func() gonvml.Return { g.freed.Add(1); return gonvml.SUCCESS }
		return s, gonvml.SUCCESS
	}
	f.lib.GpmMetricsGetFunc = func(q *gonvml.GpmMetricsGetType) gonvml.Return {
		s1, s2 := q.Sample1.(*gpmSample), q.Sample2.(*gpmSample)
		if !s1.taken || !s2.taken || s1 == s2 {
			return gonvml.ERROR_INVALID_ARGUMENT
		}
		delta := s2.value - s1.value
		for i := range q.NumMetrics {
			m := &q.Metrics[i]
			if g.unsupported[gonvml.GpmMetricId(m.MetricId)] {
				m.NvmlReturn = uint32(gonvml.ERROR_NOT_SUPPORTED)
				continue
			}
			m.Value = delta * float64(m.MetricId)
		}
		return gonvml.SUCCESS
	}
}

func TestGPMProfilingFields(t *testing.T) {
	g0, g1 := healthyGPU(0), healthyGPU(1) // GPU 1 predates Hopper
	g0.migMode = gonvml.DEVICE_MIG_ENABLE
	g0.migs = []*fakeMIG{
		{uuid: "MIG-a", name: "NVIDIA H100 80GB HBM3 MIG 3g.40gb", gi: 1, memV2: gonvml.Memory_v2{Total: 40 * gib}},
		{uuid: "MIG-b", name: "NVIDIA H100 80GB HBM3 MIG 1g.10gb", gi: 5, memV2: gonvml.Memory_v2{Total: 10 * gib}},
	}
	f := newFixture(g0, g1)
	fg := &fakeGPM{counter: map[int]float64{-1: 0, 1: 0}, // GI 5 answers no GPM
		unsupported: map[gonvml.GpmMetricId]bool{gonvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: true}}
	fg.install(f, f.devices[0], true)
	fg.install(f, f.devices[1], false)
	b := newBackend(t, f, Options{Profiling: true})

	profiling := []gpu.Field{gpu.FieldGREngineActive, gpu.FieldSMActive, gpu.FieldSMOccupancy,
		gpu.FieldTensorActive, gpu.FieldDRAMActive, gpu.FieldPCIeTxBytes, gpu.FieldPCIeRxBytes,
		gpu.FieldNVLinkTxBytes, gpu.FieldNVLinkRxBytes}
	absent := func(t *testing.T, r gpu.Reading, fields ...gpu.Field) {
		t.Helper()
		for _, fld := range fields {
			if v, ok := r.Get(fld); ok {
				t.Errorf("%s: %s = %v, want absent", r.Device.ID(), fld, v)
			}
		}
	}
	// The first collection has one sample: no delta, no fields.
	rs := collect(t, b)
	if len(rs) != 4 {
		t.Fatalf("got %d readings, want GPU 0, its 2 instances and GPU 1", len(rs))
	}
	for _, r := range rs {
		absent(t, r, profiling...)
	}
	for step, adv := range []struct{ gpu, gi1 float64 }{{0.5, 0.25}, {0.25, 0}} {
		fg.counter[-1] += adv.gpu
		fg.counter[1] += adv.gi1
		rs = collect(t, b)
		want := func(r gpu.Reading, delta float64) {
			t.Helper()
			for _, m := range gpmMetrics {
				if m.id == gonvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC {
					absent(t, r, m.field)
					continue
				}
				wantV := delta * float64(m.id) * m.factor
				if got, ok := r.Get(m.field); !ok || got != wantV {
					t.Errorf("step %d %s: %s = %v (present %v), want %v", step, r.Device.ID(), m.field, got, ok, wantV)
				}
			}
		}
		want(rs[0], adv.gpu)
		want(rs[1], adv.gi1)           // GI 1
		absent(t, rs[2], profiling...) // GI 5: NVML answers no GPM for it
		absent(t, rs[3], profiling...) // no GPM on this GPU
	}
	if n := len(f.devices[1].GpmSampleGetCalls()); n != 0 {
		t.Errorf("GPU without GPM sampled %d times", n)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if a, fr := fg.allocated.Load(), fg.freed.Load(); a == 0 || a != fr {
		t.Errorf("GPM samples: %d allocated, %d freed", a, fr)
	}
}

func TestGPMOffIsNotRead(t *testing.T) {
	f := newFixture(healthyGPU(0))
	fg := &fakeGPM{counter: map[int]float64{-1: 0}}
	fg.install(f, f.devices[0], true)
	b := newBackend(t, f, Options{})
	collect(t, b)
	collect(t, b)
	if n := fg.allocated.Load(); n != 0 {
		t.Errorf("%d GPM samples allocated with profiling off", n)
	}
}
