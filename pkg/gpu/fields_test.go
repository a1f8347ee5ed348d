package gpu_test

import (
	"testing"

	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/gpu/dcgm"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// TestSpecs walks the field table: every field has one entry, and every
// entry is whole: a name, an NVML source, dcgm-exporter names that its
// unit converts to in each schema that has them, and a feed the adapter
// can aggregate. The backends', the render's and the adapter's tests walk
// the same table for their part (TestBackendReadsEveryField,
// TestPhysicsForEveryField, TestRenderEveryField, TestIngestEveryFeed,
// TestDefaultQueriesReadEveryFeed).
func TestSpecs(t *testing.T) {
	seen := map[gpu.Field]bool{}
	names := map[string]bool{}
	series := map[string]string{}
	for _, s := range gpu.Specs {
		if seen[s.Field] {
			t.Errorf("field %d (%s) has two entries", s.Field, s.Name)
		}
		seen[s.Field] = true
		if s.Name == "" || names[s.Name] {
			t.Errorf("field %d: name %q empty or taken", s.Field, s.Name)
		}
		names[s.Name] = true
		if got, ok := gpu.ParseField(s.Name); !ok || got != s.Field || s.Field.String() != s.Name || s.Field.Spec() == nil {
			t.Errorf("field %s: ParseField, String or Spec disagree with the table", s.Name)
		}
		if s.NVML == "" {
			t.Errorf("field %s: no NVML source (docs/dcgm-compatibility.md's NVML column)", s.Name)
		}
		if len(s.DCGM) == 0 {
			t.Errorf("field %s: fills no dcgm-exporter field", s.Name)
		}
		for i := range s.DCGM {
			d := &s.DCGM[i]
			if d.Name48 == "" && d.Name410 == "" {
				t.Errorf("field %s: a dcgm-exporter field with no name in either schema", s.Name)
			}
			if d.Help == "" || (d.Type != dcgm.Gauge && d.Type != dcgm.Counter) {
				t.Errorf("field %s: %s has no help or no type", s.Name, d.Name48)
			}
			for _, sc := range dcgm.Schemas {
				n := d.Name(sc)
				if n == "" {
					continue
				}
				if other, ok := series[n+"/"+sc.String()]; ok {
					t.Errorf("field %s: %s is also field %s's in %s", s.Name, n, other, sc)
				}
				series[n+"/"+sc.String()] = s.Name
				if _, ok := dcgm.Scale(s.Unit, d.Unit(sc)); !ok {
					t.Errorf("field %s: its unit %q cannot fill %s in %q", s.Name, s.Unit, n, d.Unit(sc))
				}
				if got, _, f, ok := gpu.LookupDCGM(n); !ok || got != d || f != s.Field {
					t.Errorf("field %s: LookupDCGM(%s) does not find it", s.Name, n)
				}
			}
		}
		if f := s.Feed; f != nil {
			if f.Signal >= signal.NumSignals || f.Signal.Source() != signal.SourceGPU || f.Scale <= 0 || (f.Agg != gpu.Mean && f.Agg != gpu.Sum && f.Agg != gpu.Part) {
				t.Errorf("field %s: feed %+v needs a signal, a positive scale and an aggregation", s.Name, *f)
			}
		}
	}
	for f := range gpu.NumFields {
		if !seen[f] {
			t.Errorf("field %d, the constant after %s, has no entry in gpu.Specs", f, f-1)
		}
	}
	total := 0
	for _, s := range gpu.Specs {
		total += len(s.DCGM)
	}
	if n := len(gpu.DCGMFields()); n != total {
		t.Errorf("DCGMFields has %d fields, the table %d", n, total)
	}
}
