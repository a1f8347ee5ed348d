package exporter

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/metrics"
)

// fakeBackend is a gpu.Backend whose readings, error or panic the test sets.
type fakeBackend struct {
	calls atomic.Int64

	mu       sync.Mutex
	readings []gpu.Reading
	err      error
	panicVal any
}

func (f *fakeBackend) Kind() gpu.Kind        { return gpu.KindNVML }
func (f *fakeBackend) DriverVersion() string { return "550.1" }
func (f *fakeBackend) Close() error          { return nil }

func (f *fakeBackend) Collect(context.Context) ([]gpu.Reading, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.panicVal != nil {
		panic(f.panicVal)
	}
	if f.err != nil {
		return nil, f.err
	}
	return append([]gpu.Reading(nil), f.readings...), nil
}

func (f *fakeBackend) set(fn func(f *fakeBackend)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// fakePods is a static PodSource.
type fakePods map[string][]metrics.PodRef

func (p fakePods) PodsByDevice() map[string][]metrics.PodRef { return p }

func reading(index int, util float64) gpu.Reading {
	r := gpu.Reading{Device: gpu.Device{
		Index: index, Minor: index, UUID: "GPU-" + string(rune('a'+index)), ModelName: "NVIDIA H100 80GB HBM3",
		PCIBusID: "00000000:18:00.0",
	}}
	r.Set(gpu.FieldGPUUtil, util)
	r.Set(gpu.FieldFBUsed, 1000)
	return r
}

func migReading(parent, gi int) gpu.Reading {
	r := gpu.Reading{Device: reading(parent, 0).Device}
	r.Device.MIG = &gpu.MIG{UUID: "MIG-" + string(rune('a'+parent)) + string(rune('0'+gi)), GPUInstanceID: gi, Profile: "1g.10gb"}
	r.Set(gpu.FieldFBUsed, 500)
	return r
}

const interval = time.Second

// newTestCollector wires a collector on a fake clock to a pedantic registry
// holding it and its own metrics.
func newTestCollector(t *testing.T, b gpu.Backend, pods PodSource) (*Collector, *clocktesting.FakeClock, prometheus.Gatherer) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	c, err := NewCollector(Config{Backend: b, Pods: pods, Hostname: "node-a", Interval: interval, Registerer: reg})
	if err != nil {
		t.Fatalf("NewCollector: %v", err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	c.now = clk.Now
	return c, clk, prometheus.Gatherers{reg, c}
}

// series returns the samples of one family, keyed by a label's value.
func series(t *testing.T, reg prometheus.Gatherer, name, by string) map[string][]*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string][]*dto.Metric{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[label(m, by)] = append(out[label(m, by)], m)
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// scalar returns the value of a family with a single unlabelled series.
func scalar(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	s := series(t, reg, name, "")[""]
	if len(s) != 1 {
		t.Fatalf("%s: %d series, want 1", name, len(s))
	}
	m := s[0]
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	t.Fatalf("%s: unexpected type", name)
	return 0
}
