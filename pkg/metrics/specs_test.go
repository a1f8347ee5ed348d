package metrics_test

import (
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/gpu/dcgm"
	"github.com/gpuscale/gpuscale/pkg/metrics"
)

// TestRenderEveryField walks gpu.Specs: a reading with every field set
// must render each field under every name its entry gives in the schema,
// with its type and its value converted to the series' unit.
func TestRenderEveryField(t *testing.T) {
	r := gpu.Reading{Device: device(0, nil)}
	for _, s := range gpu.Specs {
		r.Set(s.Field, 2)
	}
	for _, sc := range dcgm.Schemas {
		mfs := build(t, metrics.NewGPUBuilder(metrics.Options{Schema: sc}), []metrics.DeviceState{{Reading: r}})
		byName := map[string]*dto.MetricFamily{}
		for _, mf := range mfs {
			byName[mf.GetName()] = mf
		}
		for _, s := range gpu.Specs {
			for i := range s.DCGM {
				d := &s.DCGM[i]
				name := d.Name(sc)
				if name == "" {
					continue
				}
				mf := byName[name]
				if mf == nil || len(mf.GetMetric()) != 1 {
					t.Errorf("%s: field %s is not rendered as %s", sc, s.Name, name)
					continue
				}
				k, _ := dcgm.Scale(s.Unit, d.Unit(sc))
				m := mf.GetMetric()[0]
				want := dto.MetricType_GAUGE
				got := m.GetGauge().GetValue()
				if d.Type == dcgm.Counter {
					want, got = dto.MetricType_COUNTER, m.GetCounter().GetValue()
				}
				if mf.GetType() != want || got != 2*k || mf.GetHelp() != d.HelpText(sc) {
					t.Errorf("%s: field %s as %s: %s %v %q, want %s %v %q", sc, s.Name, name,
						mf.GetType(), got, mf.GetHelp(), want, 2*k, d.HelpText(sc))
				}
			}
		}
	}
}
