package exporter

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/gpu/dcgm"
)

// TestXIDErrorsCountWindow: DCGM_EXP_XID_ERRORS_COUNT counts each code's
// XIDs within the window, from the backend's cumulative counts, and falls
// back to one series at 0 once they leave it.
func TestXIDErrorsCountWindow(t *testing.T) {
	r := reading(0, 10)
	r.XIDCounts = map[uint64]uint64{}
	b := &fakeBackend{readings: []gpu.Reading{r}}
	reg := prometheus.NewPedanticRegistry()
	c, err := NewCollector(Config{Backend: b, Hostname: "n", Interval: interval, Registerer: reg,
		XIDCountWindow: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	c.now = clk.Now
	g := prometheus.Gatherers{reg, c}
	steps := []struct {
		advance time.Duration
		counts  map[uint64]uint64 // cumulative, as the backend reports
		want    map[string]float64
	}{
		{0, map[uint64]uint64{}, map[string]float64{"": 0}},
		{time.Second, map[uint64]uint64{79: 1}, map[string]float64{"79": 1}},
		{4 * time.Second, map[uint64]uint64{79: 3, 48: 1}, map[string]float64{"79": 3, "48": 1}},
		{6 * time.Second, map[uint64]uint64{79: 3, 48: 1}, map[string]float64{"79": 2, "48": 1}}, // the first left the window
		{10 * time.Second, map[uint64]uint64{79: 3, 48: 1}, map[string]float64{"": 0}},
		// A backend restart counts from 0 again: what it has is new.
		{time.Second, map[uint64]uint64{13: 2}, map[string]float64{"13": 2}},
	}
	for i, st := range steps {
		clk.Step(st.advance)
		b.set(func(f *fakeBackend) { f.readings[0].XIDCounts = st.counts })
		if err := c.CollectOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for xid, ms := range series(t, g, dcgm.XIDErrorsCount, "xid") {
			for _, m := range ms {
				got[xid] += m.GetGauge().GetValue()
				if w := label(m, "window_size_in_ms"); w != "10000" {
					t.Errorf("step %d: window_size_in_ms = %q", i, w)
				}
			}
		}
		if len(got) != len(st.want) {
			t.Errorf("step %d: %v, want %v", i, got, st.want)
			continue
		}
		for k, v := range st.want {
			if got[k] != v {
				t.Errorf("step %d: xid %q = %v, want %v", i, k, got[k], v)
			}
		}
	}
}

// TestFieldErrorsCounted: a field the backend failed to read is counted by
// field and code, and the device's other fields are still served.
func TestFieldErrorsCounted(t *testing.T) {
	r := reading(0, 10)
	r.FieldErrors = []gpu.FieldError{{Field: gpu.FieldPowerUsage, Code: "ERROR_UNKNOWN"}}
	b := &fakeBackend{readings: []gpu.Reading{r}}
	c, _, g := newTestCollector(t, b, nil)
	for range 2 {
		if err := c.CollectOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	got := series(t, g, "gpuscale_exporter_field_errors_total", "field")["power_usage_w"]
	if len(got) != 1 || label(got[0], "code") != "ERROR_UNKNOWN" || got[0].GetCounter().GetValue() != 2 {
		t.Errorf("field errors = %v, want power_usage_w ERROR_UNKNOWN at 2", got)
	}
	if util := series(t, g, "DCGM_FI_DEV_GPU_UTIL", "gpu")["0"]; len(util) != 1 {
		t.Errorf("GPU_UTIL of the device with a failed field = %v", util)
	}
	if up := series(t, g, "gpuscale_gpu_up", "gpu")["0"]; len(up) != 1 || up[0].GetGauge().GetValue() != 1 {
		t.Errorf("gpuscale_gpu_up = %v, want 1", up)
	}
}

// TestSchema410: the collector serves the schema it is configured with.
func TestSchema410(t *testing.T) {
	b := &fakeBackend{readings: []gpu.Reading{reading(0, 25)}}
	reg := prometheus.NewPedanticRegistry()
	c, err := NewCollector(Config{Backend: b, Hostname: "n", Interval: interval, Registerer: reg, Schema: dcgm.Schema410})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CollectOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	g := prometheus.Gatherers{reg, c}
	if got := series(t, g, dcgm.GPUUtil, "gpu"); len(got) != 0 {
		t.Errorf("4.10 schema serves the 4.8 name: %v", got)
	}
	ratio := series(t, g, dcgm.GPUUtilRatio, "gpu")["0"]
	if len(ratio) != 1 || ratio[0].GetGauge().GetValue() != 0.25 || label(ratio[0], "hostname") != "n" {
		t.Errorf("%s = %v, want 0.25 with hostname n", dcgm.GPUUtilRatio, ratio)
	}
	if s := c.Snapshot(); s.Schema != dcgm.Schema410 {
		t.Errorf("snapshot schema = %v", s.Schema)
	}
}
