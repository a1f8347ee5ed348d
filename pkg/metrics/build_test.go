package metrics_test

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/gpu/dcgm"
	"github.com/gpuscale/gpuscale/pkg/metrics"
)

// dcgmLabels are each schema's label sets, pod labels included.
var dcgmLabels = map[dcgm.Schema][]string{
	dcgm.Schema48: {"DCGM_FI_DRIVER_VERSION", "GPU_I_ID", "GPU_I_PROFILE", "Hostname", "UUID",
		"container", "device", "gpu", "hostname", "modelName", "namespace", "pci_bus_id", "pod"},
	dcgm.Schema410: {"DCGM_FI_SYSTEM_DRIVER_VERSION", "GPU_I_ID", "GPU_I_PROFILE", "UUID",
		"container", "device", "gpu", "hostname", "modelName", "namespace", "pci_bus_id", "pod"},
}

func newBuilder(s dcgm.Schema, simulated bool) *metrics.GPUBuilder {
	return metrics.NewGPUBuilder(metrics.Options{Schema: s, Hostname: "node-a", DriverVersion: "550.54.15",
		Simulated: simulated, XIDCountWindow: 5 * time.Minute})
}

func labelMap(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

func families(mfs []*dto.MetricFamily) map[string]*dto.MetricFamily {
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// TestBuildShape asserts what the golden files show, so that an -update
// cannot bless a regression unnoticed: every field of the schema is served
// under its name, type and labels, and no name of the other schema is.
func TestBuildShape(t *testing.T) {
	for _, schema := range dcgm.Schemas {
		for _, simulated := range []bool{false, true} {
			fams := families(build(t, newBuilder(schema, simulated), fixture()))
			wantLabels := dcgmLabels[schema]
			if simulated {
				wantLabels = slices.Sorted(slices.Values(append(slices.Clone(wantLabels), "simulated")))
			}
			served := map[string]bool{metrics.XIDErrorsCountName: true}
			for _, f := range metrics.DCGMFields(schema) {
				served[f.Name] = true
				mf := fams[f.Name]
				if mf == nil {
					t.Errorf("%s simulated=%v: no %s family", schema, simulated, f.Name)
					continue
				}
				wantType := dto.MetricType_GAUGE
				if f.DCGM.Type == dcgm.Counter {
					wantType = dto.MetricType_COUNTER
				}
				if mf.GetType() != wantType {
					t.Errorf("%s %s: type %v, want %v", schema, f.Name, mf.GetType(), wantType)
				}
				for _, m := range mf.GetMetric() {
					l := labelMap(m)
					if got := slices.Sorted(maps.Keys(l)); !slices.Equal(got, wantLabels) {
						t.Errorf("%s %s: labels %v, want %v", schema, f.Name, got, wantLabels)
					}
					if simulated != (l["simulated"] == "true") {
						t.Errorf("%s: simulated label %q on simulated=%v", f.Name, l["simulated"], simulated)
					}
					if l["gpu"] == "3" {
						t.Errorf("%s: series for the lost GPU 3", f.Name)
					}
				}
			}
			for name := range fams {
				if strings.HasPrefix(name, "DCGM_") && !served[name] {
					t.Errorf("%s serves %s, a name of another schema", schema, name)
				}
			}
		}
	}
}

// TestSchemasServeTheSameState: every series of the 4.10 schema, converted
// back to its 4.8 unit, equals its 4.8 twin, on the same GPU state.
func TestSchemasServeTheSameState(t *testing.T) {
	old := families(build(t, newBuilder(dcgm.Schema48, false), fixture()))
	cur := families(build(t, newBuilder(dcgm.Schema410, false), fixture()))
	key := func(m *dto.Metric) string {
		l := labelMap(m)
		delete(l, "Hostname")
		delete(l, "DCGM_FI_DRIVER_VERSION")
		delete(l, "DCGM_FI_SYSTEM_DRIVER_VERSION")
		return fmt.Sprint(l)
	}
	value := func(m *dto.Metric) float64 { return m.GetGauge().GetValue() + m.GetCounter().GetValue() }
	compared := 0
	for _, f := range metrics.DCGMFields(dcgm.Schema410) {
		var alias dcgm.Alias
		for _, a := range f.DCGM.Aliases() {
			if a.Name == f.Name {
				alias = a
			}
		}
		oldName := f.DCGM.Name48
		if oldName == "" || alias.Name == "" {
			t.Errorf("%s: no 4.8 name to compare with", f.Name)
			continue
		}
		want := map[string]float64{}
		for _, m := range old[oldName].GetMetric() {
			want[key(m)] = value(m)
		}
		if len(cur[f.Name].GetMetric()) != len(want) {
			t.Errorf("%s has %d series, %s %d", f.Name, len(cur[f.Name].GetMetric()), oldName, len(want))
		}
		for _, m := range cur[f.Name].GetMetric() {
			w, ok := want[key(m)]
			got := value(m) * alias.ToUnit48
			if !ok || math.Abs(got-w) > 1e-9*math.Max(1, math.Abs(w)) {
				t.Errorf("%s%v = %v, converted %v; %s = %v", f.Name, key(m), value(m), got, oldName, w)
			}
			compared++
		}
	}
	if compared < 100 {
		t.Errorf("compared only %d series", compared)
	}
}

func TestBuildSeriesPerDevice(t *testing.T) {
	fams := families(build(t, newBuilder(dcgm.Schema48, false), fixture()))
	count := func(name string, match func(map[string]string) bool) int {
		n := 0
		for _, m := range fams[name].GetMetric() {
			if match(labelMap(m)) {
				n++
			}
		}
		return n
	}
	gpuN := func(g string) func(map[string]string) bool {
		return func(l map[string]string) bool { return l["gpu"] == g && l["GPU_I_ID"] == "" }
	}
	tests := []struct {
		name   string
		family string
		match  func(map[string]string) bool
		want   int
	}{
		{"one util series per pod of the time-sliced GPU", "DCGM_FI_DEV_GPU_UTIL", gpuN("1"), 2},
		{"unallocated GPU has one series", "DCGM_FI_DEV_GPU_UTIL", gpuN("2"), 1},
		{"MIG instances report no utilization", "DCGM_FI_DEV_GPU_UTIL",
			func(l map[string]string) bool { return l["GPU_I_ID"] != "" }, 0},
		{"MIG instances report memory, with their pods", "DCGM_FI_DEV_FB_USED",
			func(l map[string]string) bool { return l["GPU_I_ID"] != "" && l["pod"] != "" }, 2},
		{"MIG instance carries its profile", "DCGM_FI_DEV_FB_TOTAL",
			func(l map[string]string) bool { return l["GPU_I_ID"] == "2" && l["GPU_I_PROFILE"] == "1g.10gb" }, 1},
		{"time-sliced pods are named", "DCGM_FI_DEV_POWER_USAGE",
			func(l map[string]string) bool { return l["namespace"] == "team-b" && l["pod"] == "notebook-b" }, 1},
		{"lost GPU has no DCGM series", "DCGM_FI_DEV_FB_USED", gpuN("3"), 0},
		{"every device has an up series", "gpuscale_gpu_up", func(map[string]string) bool { return true }, 6},
		{"XID counter per code seen, and per fatal code at 0", "gpuscale_gpu_xid_errors_total", gpuN("1"), 2 + len(gpu.FatalXIDs) - 1},
		{"no XID counters on a device whose XIDs are not watched", "gpuscale_gpu_xid_errors_total", gpuN("2"), 0},
		{"XID count per code within the window, per pod", "DCGM_EXP_XID_ERRORS_COUNT",
			func(l map[string]string) bool {
				return l["gpu"] == "1" && l["xid"] == "79" && l["window_size_in_ms"] == "300000"
			}, 2},
		{"XID count at 0 without a code when none is in the window", "DCGM_EXP_XID_ERRORS_COUNT",
			func(l map[string]string) bool { return l["gpu"] == "2" && l["xid"] == "" }, 1},
		{"no XID count where XIDs are not watched", "DCGM_EXP_XID_ERRORS_COUNT", gpuN("0"), 0},
		{"FB capacity in bytes beside FB_TOTAL", "DCGM_FI_DEV_FB_CAPACITY_BYTES", gpuN("2"), 1},
	}
	for _, tc := range tests {
		if got := count(tc.family, tc.match); got != tc.want {
			t.Errorf("%s: %d %s series, want %d", tc.name, got, tc.family, tc.want)
		}
	}
	for _, m := range fams["gpuscale_gpu_up"].GetMetric() {
		want := 1.0
		if labelMap(m)["gpu"] == "3" {
			want = 0
		}
		if m.GetGauge().GetValue() != want {
			t.Errorf("gpuscale_gpu_up%v = %v, want %v", labelMap(m), m.GetGauge().GetValue(), want)
		}
	}
	for _, m := range fams["gpuscale_gpu_xid_errors_total"].GetMetric() {
		want := map[string]float64{"79": 2, "13": 1}[labelMap(m)["xid"]]
		if m.GetCounter().GetValue() != want {
			t.Errorf("xid %s count = %v, want %v", labelMap(m)["xid"], m.GetCounter().GetValue(), want)
		}
	}
}

func TestBuildEmpty(t *testing.T) {
	if got := newBuilder(dcgm.Schema48, false).Build(nil, nil); len(got) != 0 {
		t.Errorf("Build(nil) = %d families, want none", len(got))
	}
}

func TestPodUIDAndLabels(t *testing.T) {
	meta := pods{"team-a/notebook-a": {UID: "uid-a", Labels: []metrics.Label{
		{Name: "app", Value: "jupyter"}, {Name: "pod", Value: "spoofed"}, {Name: "UUID", Value: "spoofed"}}}}
	tests := []struct {
		name           string
		uid, podLabels bool
		want           map[string]string // on notebook-a's GPU_UTIL
		absent         []string
	}{
		{"off", false, false, map[string]string{"pod": "notebook-a"}, []string{"pod_uid", "app"}},
		{"uid", true, false, map[string]string{"pod_uid": "uid-a"}, []string{"app"}},
		{"labels, never over the exporter's own", false, true, map[string]string{"app": "jupyter", "pod": "notebook-a",
			"UUID": "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd"}, []string{"pod_uid"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := metrics.NewGPUBuilder(metrics.Options{Hostname: "node-a", PodUID: tc.uid, PodLabels: tc.podLabels})
			mfs := b.Build(fixture(), meta)
			found := false
			for _, m := range families(mfs)["DCGM_FI_DEV_GPU_UTIL"].GetMetric() {
				l := labelMap(m)
				switch l["pod"] {
				case "notebook-a":
					found = true
					for k, v := range tc.want {
						if l[k] != v {
							t.Errorf("%s = %q, want %q", k, l[k], v)
						}
					}
					for _, k := range tc.absent {
						if _, ok := l[k]; ok {
							t.Errorf("label %s present", k)
						}
					}
				case "notebook-b":
					if _, ok := l["pod_uid"]; ok {
						t.Errorf("pod_uid on a pod the metadata does not know: %v", l)
					}
				}
			}
			if !found {
				t.Fatal("no series of notebook-a")
			}
			// The text must parse: no label twice.
			if _, err := parseText(encode(t, mfs, expfmt.NewFormat(expfmt.TypeTextPlain))); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestParseCollectors(t *testing.T) {
	tests := []struct {
		name      string
		csv       string
		want      []string // families served in 4.10, beyond gpuscale's own
		warnings  int
		errSubstr string
	}{
		{name: "either schema's names, comments and blanks",
			csv: "# Format\n\nDCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n" +
				"DCGM_FI_DEV_FB_USED_BYTES, gauge, used\nDCGM_FI_SYSTEM_DRIVER_VERSION, label, Driver\n" +
				"DCGM_EXP_XID_ERRORS_COUNT, gauge, xids\n",
			want: []string{"DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DEV_FB_USED_BYTES", "DCGM_FI_DEV_GPU_UTIL_RATIO"}},
		{name: "a field NVML cannot give is skipped with a warning",
			csv:  "DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_EXP_GPU_HEALTH_STATUS, gauge, health\n",
			want: []string{"DCGM_FI_DEV_GPU_TEMP_CELSIUS"}, warnings: 1},
		{name: "unknown field", csv: "DCGM_FI_DEV_NO_SUCH, gauge, x\n", errSubstr: "neither"},
		{name: "bad type", csv: "DCGM_FI_DEV_GPU_TEMP, histogram, x\n", errSubstr: "type"},
		{name: "empty", csv: "# nothing\n", errSubstr: "no field"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sel, warnings, err := metrics.ParseCollectors(strings.NewReader(tc.csv))
			if tc.errSubstr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errSubstr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.errSubstr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(warnings) != tc.warnings {
				t.Errorf("warnings = %q, want %d", warnings, tc.warnings)
			}
			b := metrics.NewGPUBuilder(metrics.Options{Schema: dcgm.Schema410, Hostname: "n", Selection: sel, XIDCountWindow: time.Minute})
			var got []string
			for name := range families(b.Build(fixture(), nil)) {
				if strings.HasPrefix(name, "DCGM_") {
					got = append(got, name)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("served %v, want %v", got, tc.want)
			}
		})
	}
}
