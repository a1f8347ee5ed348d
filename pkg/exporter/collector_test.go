package exporter

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/gpu/dcgm"
	"github.com/gpuscale/gpuscale/pkg/metrics"
)

func TestNewCollectorValidates(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"no backend", Config{Interval: time.Second}, "backend is required"},
		{"zero interval", Config{Backend: &fakeBackend{}}, "interval must be positive"},
		{"negative interval", Config{Backend: &fakeBackend{}, Interval: -time.Second}, "interval must be positive"},
	}
	for _, tc := range tests {
		if _, err := NewCollector(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: err = %v, want it to mention %q", tc.name, err, tc.wantErr)
		}
	}
	reg := prometheus.NewRegistry()
	cfg := Config{Backend: &fakeBackend{}, Interval: time.Second, Registerer: reg}
	if _, err := NewCollector(cfg); err != nil {
		t.Fatalf("first collector: %v", err)
	}
	if _, err := NewCollector(cfg); err == nil || !strings.Contains(err.Error(), "register own metrics") {
		t.Errorf("second collector on the same registry: err = %v, want a registration error", err)
	}
}

func TestCollectOncePublishesSnapshot(t *testing.T) {
	b := &fakeBackend{readings: []gpu.Reading{reading(0, 10), reading(1, 20)}}
	c, clk, reg := newTestCollector(t, b, nil)
	if c.Snapshot() != nil {
		t.Fatal("snapshot before the first collection")
	}
	if ok, _ := c.Healthy(); ok {
		t.Error("healthy before the first collection")
	}
	if got := series(t, reg, "DCGM_FI_DEV_GPU_UTIL", "gpu"); len(got) != 0 {
		t.Errorf("GPU series before the first collection: %v", got)
	}
	if err := c.CollectOnce(context.Background()); err != nil {
		t.Fatalf("CollectOnce: %v", err)
	}
	s := c.Snapshot()
	if s == nil {
		t.Fatal("no snapshot after CollectOnce")
	}
	if !s.Time.Equal(clk.Now()) || s.Backend != gpu.KindNVML || s.Driver != "550.1" || len(s.Devices) != 2 {
		t.Errorf("snapshot = time %v backend %q driver %q %d devices", s.Time, s.Backend, s.Driver, len(s.Devices))
	}
	util := series(t, reg, "DCGM_FI_DEV_GPU_UTIL", "gpu")
	for g, want := range map[string]float64{"0": 10, "1": 20} {
		if len(util[g]) != 1 || util[g][0].GetGauge().GetValue() != want {
			t.Errorf("DCGM_FI_DEV_GPU_UTIL{gpu=%q} = %v, want %v", g, util[g], want)
		}
		if got := label(util[g][0], "simulated"); got != "" {
			t.Errorf("a non-sim backend's series carry simulated=%q", got)
		}
	}
	if got := scalar(t, reg, "gpuscale_exporter_devices"); got != 2 {
		t.Errorf("gpuscale_exporter_devices = %v, want 2", got)
	}
	if got, want := scalar(t, reg, "gpuscale_exporter_last_collection_success_timestamp_seconds"), float64(clk.Now().Unix()); got != want {
		t.Errorf("last success = %v, want %v", got, want)
	}
	if got := scalar(t, reg, "gpuscale_exporter_collection_duration_seconds"); got != 1 {
		t.Errorf("collection duration observations = %v, want 1", got)
	}
	if ok, age := c.Healthy(); !ok || age != 0 {
		t.Errorf("Healthy() = %v, %v right after a collection", ok, age)
	}
}

func TestGPUFailingMidRun(t *testing.T) {
	b := &fakeBackend{readings: []gpu.Reading{reading(0, 10), reading(1, 20)}}
	c, _, reg := newTestCollector(t, b, nil)
	ctx := context.Background()
	if err := c.CollectOnce(ctx); err != nil {
		t.Fatal(err)
	}
	b.set(func(f *fakeBackend) {
		f.readings[0].Set(gpu.FieldGPUUtil, 11)
		f.readings[1] = gpu.Reading{Device: f.readings[1].Device, Err: errors.New("GPU is lost")}
	})
	if err := c.CollectOnce(ctx); err != nil {
		t.Fatalf("one GPU failing must not fail the collection: %v", err)
	}
	up := series(t, reg, "gpuscale_gpu_up", "gpu")
	if up["0"][0].GetGauge().GetValue() != 1 || up["1"][0].GetGauge().GetValue() != 0 {
		t.Errorf("gpuscale_gpu_up = %v, want gpu 0 up and gpu 1 down", up)
	}
	for _, f := range metrics.DCGMFields(dcgm.Schema48) {
		if s := series(t, reg, f.Name, "gpu"); len(s["1"]) != 0 {
			t.Errorf("%s has series for the failed GPU", f.Name)
		}
	}
	if got := series(t, reg, "DCGM_FI_DEV_GPU_UTIL", "gpu")["0"]; len(got) != 1 || got[0].GetGauge().GetValue() != 11 {
		t.Errorf("GPU 0 utilization = %v, want the new 11", got)
	}
	if got := scalar(t, reg, "gpuscale_exporter_devices_unhealthy"); got != 1 {
		t.Errorf("gpuscale_exporter_devices_unhealthy = %v, want 1", got)
	}
	if got := scalar(t, reg, "gpuscale_exporter_collection_errors_total"); got != 0 {
		t.Errorf("collection errors = %v, want 0", got)
	}
}

func TestBackendErrorKeepsSnapshot(t *testing.T) {
	b := &fakeBackend{readings: []gpu.Reading{reading(0, 10)}}
	c, clk, reg := newTestCollector(t, b, nil)
	ctx := context.Background()
	if err := c.CollectOnce(ctx); err != nil {
		t.Fatal(err)
	}
	good := c.Snapshot()
	errDriver := errors.New("driver gone")
	b.set(func(f *fakeBackend) { f.err = errDriver })

	tests := []struct {
		advance time.Duration
		healthy bool
	}{
		{interval, true},
		{interval, true},
		{interval, true}, // exactly three intervals old
		{time.Nanosecond, false},
		{10 * interval, false},
	}
	for i, tc := range tests {
		clk.Step(tc.advance)
		err := c.CollectOnce(ctx)
		if !errors.Is(err, errDriver) || !strings.Contains(err.Error(), "nvml backend") {
			t.Errorf("step %d: CollectOnce error %v, want it to wrap %v and name the backend", i, err, errDriver)
		}
		if c.Snapshot() != good {
			t.Errorf("step %d: the previous snapshot was replaced", i)
		}
		if got := scalar(t, reg, "gpuscale_exporter_collection_errors_total"); got != float64(i+1) {
			t.Errorf("step %d: errors counter = %v, want %d", i, got, i+1)
		}
		ok, age := c.Healthy()
		if ok != tc.healthy || age != clk.Now().Sub(good.Time) {
			t.Errorf("step %d: Healthy() = %v, %v; want %v, %v", i, ok, age, tc.healthy, clk.Now().Sub(good.Time))
		}
	}
	// The stale snapshot is still served: the series do not vanish.
	if got := series(t, reg, "DCGM_FI_DEV_GPU_UTIL", "gpu")["0"]; len(got) != 1 {
		t.Errorf("GPU series after failures: %v", got)
	}
	b.set(func(f *fakeBackend) { f.err = nil })
	if err := c.CollectOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, _ := c.Healthy(); !ok {
		t.Error("not healthy after the backend recovered")
	}
}

func TestBackendPanicIsAnError(t *testing.T) {
	b := &fakeBackend{readings: []gpu.Reading{reading(0, 10)}}
	c, _, reg := newTestCollector(t, b, nil)
	if err := c.CollectOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	good := c.Snapshot()
	b.set(func(f *fakeBackend) { f.panicVal = "nil map write" })
	err := c.CollectOnce(context.Background())
	if err == nil || !strings.Contains(err.Error(), "panicked") || !strings.Contains(err.Error(), "nil map write") {
		t.Fatalf("CollectOnce after a backend panic: err = %v", err)
	}
	if c.Snapshot() != good {
		t.Error("a panicking collection replaced the snapshot")
	}
	if got := scalar(t, reg, "gpuscale_exporter_collection_errors_total"); got != 1 {
		t.Errorf("errors counter = %v, want 1", got)
	}
}

func TestScrapeNeverCallsBackend(t *testing.T) {
	b := &fakeBackend{readings: []gpu.Reading{reading(0, 10)}}
	c, _, reg := newTestCollector(t, b, nil)
	if err := c.CollectOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if _, err := reg.Gather(); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.calls.Load(); n != 1 {
		t.Errorf("backend called %d times for 1 collection and 50 scrapes, want 1", n)
	}
}

func TestPodsLandInLabels(t *testing.T) {
	b := &fakeBackend{readings: []gpu.Reading{reading(0, 10), reading(1, 20), migReading(2, 1), migReading(2, 2), reading(3, 0)}}
	pods := fakePods{
		"GPU-a": {{Namespace: "llm", Pod: "vllm-0", Container: "vllm"}},
		// Time-sliced: two pods share GPU 1.
		"GPU-b":  {{Namespace: "a", Pod: "nb-a", Container: "jupyter"}, {Namespace: "b", Pod: "nb-b", Container: "jupyter"}},
		"MIG-c1": {{Namespace: "batch", Pod: "embed", Container: "worker"}},
		// A device the node does not report is ignored.
		"GPU-z": {{Namespace: "x", Pod: "ghost", Container: "c"}},
	}
	c, _, reg := newTestCollector(t, b, pods)
	if err := c.CollectOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	byPod := series(t, reg, "DCGM_FI_DEV_FB_USED", "pod")
	tests := []struct {
		pod, namespace, container, gpu, gi string
	}{
		{"vllm-0", "llm", "vllm", "0", ""},
		{"nb-a", "a", "jupyter", "1", ""},
		{"nb-b", "b", "jupyter", "1", ""},
		{"embed", "batch", "worker", "2", "1"},
	}
	for _, tc := range tests {
		s := byPod[tc.pod]
		if len(s) != 1 {
			t.Errorf("pod %s: %d FB_USED series, want 1", tc.pod, len(s))
			continue
		}
		m := s[0]
		if label(m, "namespace") != tc.namespace || label(m, "container") != tc.container ||
			label(m, "gpu") != tc.gpu || label(m, "GPU_I_ID") != tc.gi {
			t.Errorf("pod %s: series %v", tc.pod, m.GetLabel())
		}
	}
	// Unheld devices (GPU 3, MIG instance 2) have one series with empty pod
	// labels; the ghost pod has none.
	if got := len(byPod[""]); got != 2 {
		t.Errorf("%d FB_USED series without a pod, want 2", got)
	}
	if len(byPod["ghost"]) != 0 {
		t.Error("series for a pod holding a device the node does not report")
	}
	// The time-sliced GPU has one series per pod for every field.
	if got := len(series(t, reg, "DCGM_FI_DEV_GPU_UTIL", "gpu")["1"]); got != 2 {
		t.Errorf("time-sliced GPU: %d GPU_UTIL series, want 2", got)
	}
	if got := c.Snapshot().Devices[1].Pods; len(got) != 2 {
		t.Errorf("snapshot pods of GPU 1 = %v", got)
	}
}

func TestRunCollectsUntilCancelled(t *testing.T) {
	b := &fakeBackend{readings: []gpu.Reading{reading(0, 10)}}
	c, err := NewCollector(Config{Backend: b, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	deadline := time.After(10 * time.Second)
	for b.calls.Load() < 3 {
		select {
		case <-deadline:
			t.Fatalf("only %d collections in 10s", b.calls.Load())
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if c.Snapshot() == nil {
		t.Error("no snapshot after Run")
	}
}

// droppingBackend is a backend that reports XID events it did not count.
type droppingBackend struct {
	fakeBackend
	dropped uint64
}

func (d *droppingBackend) DroppedXIDEvents() uint64 { return d.dropped }

func TestDroppedXIDEventsExported(t *testing.T) {
	b := &droppingBackend{dropped: 7}
	_, _, reg := newTestCollector(t, b, nil)
	if got := scalar(t, reg, "gpuscale_exporter_xid_events_dropped_total"); got != 7 {
		t.Errorf("gpuscale_exporter_xid_events_dropped_total = %v, want 7", got)
	}
	// A backend that drops nothing has no such series.
	_, _, reg = newTestCollector(t, &fakeBackend{}, nil)
	if got := series(t, reg, "gpuscale_exporter_xid_events_dropped_total", ""); len(got) != 0 {
		t.Errorf("series without a dropping backend: %v", got)
	}
}
