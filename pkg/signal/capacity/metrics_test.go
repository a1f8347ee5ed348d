package capacity

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// distinctEstimate sets every number of an Estimate, nested ones included,
// to a value no other number has, so a gauge's value names the field it read.
func distinctEstimate(t *testing.T) (Estimate, map[float64]string) {
	t.Helper()
	var e Estimate
	fields := map[float64]string{}
	next := 1.0
	var fill func(v reflect.Value, path string)
	fill = func(v reflect.Value, path string) {
		switch {
		case v.Type() == reflect.TypeFor[time.Duration]():
			v.SetInt(int64(next * float64(time.Second)))
		case v.Kind() == reflect.Float64:
			v.SetFloat(next)
		case v.Kind() == reflect.Int:
			v.SetInt(int64(next))
		case v.Kind() == reflect.Struct:
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					fill(v.Field(i), path+"."+v.Type().Field(i).Name)
				}
			}
			return
		default:
			return
		}
		fields[next] = path
		next++
	}
	fill(reflect.ValueOf(&e).Elem(), "Estimate")
	return e, fields
}

// TestEstimateGaugesReadDistinctParts walks the gauge table: each entry
// exports a part of the estimate that no other entry exports, under its own
// name, with a help text, and forget removes every one of its series.
func TestEstimateGaugesReadDistinctParts(t *testing.T) {
	e, fields := distinctEstimate(t)
	m := NewMetrics()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.Collectors()...)
	k := Key{Namespace: "ns", Target: "deployment/d"}
	m.set(k, e)

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	read := map[string]string{} // gauge -> Estimate field it read
	byField := map[string]string{}
	for _, f := range families {
		if f.GetType() != dto.MetricType_GAUGE {
			continue
		}
		if len(f.GetMetric()) != 1 {
			t.Fatalf("%s: %d series, want 1", f.GetName(), len(f.GetMetric()))
		}
		field, ok := fields[f.GetMetric()[0].GetGauge().GetValue()]
		if !ok {
			t.Errorf("%s = %g: no part of the estimate has that value", f.GetName(), f.GetMetric()[0].GetGauge().GetValue())
			continue
		}
		if other, dup := byField[field]; dup {
			t.Errorf("%s and %s both export %s", f.GetName(), other, field)
		}
		byField[field] = f.GetName()
		read[f.GetName()] = field
		if !strings.HasPrefix(f.GetName(), "gpuscale_adapter_capacity_") || f.GetHelp() == "" {
			t.Errorf("%s: want the gpuscale_adapter_capacity_ prefix and a help text", f.GetName())
		}
	}
	if len(read) != len(estimateGauges) {
		t.Errorf("%d gauges read a part of the estimate, want one per table entry (%d)", len(read), len(estimateGauges))
	}

	m.forget(k)
	families, err = reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetType() == dto.MetricType_GAUGE && len(f.GetMetric()) > 0 {
			t.Errorf("%s: %d series left after forget", f.GetName(), len(f.GetMetric()))
		}
	}
}
