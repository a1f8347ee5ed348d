package metrics_test

import (
	"maps"
	"slices"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/metrics"
)

// dcgmLabels is dcgm-exporter's label set, pod labels included.
var dcgmLabels = []string{"DCGM_FI_DRIVER_VERSION", "GPU_I_ID", "GPU_I_PROFILE", "Hostname", "UUID",
	"container", "device", "gpu", "modelName", "namespace", "pci_bus_id", "pod"}

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

// counters are the fields dcgm-exporter's default list types as counters.
var counters = map[string]bool{
	"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": true, "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": true,
	"DCGM_FI_DEV_PCIE_RX_THROUGHPUT": true, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": true,
	"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": true, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": true,
	"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": true,
}

// TestBuildShape asserts what the golden files show, so that an -update
// cannot bless a regression unnoticed.
func TestBuildShape(t *testing.T) {
	for _, simulated := range []bool{false, true} {
		fams := families(gather(t, metrics.NewGPUBuilder("node-a", "550.54.15", simulated), fixture()))
		wantLabels := dcgmLabels
		if simulated {
			wantLabels = slices.Sorted(slices.Values(append(slices.Clone(dcgmLabels), "simulated")))
		}
		for _, f := range metrics.DCGMFields {
			mf := fams[f.Name]
			if mf == nil {
				t.Errorf("simulated=%v: no %s family", simulated, f.Name)
				continue
			}
			wantType := dto.MetricType_GAUGE
			if counters[f.Name] {
				wantType = dto.MetricType_COUNTER
			}
			if mf.GetType() != wantType {
				t.Errorf("%s: type %v, want %v", f.Name, mf.GetType(), wantType)
			}
			for _, m := range mf.GetMetric() {
				l := labelMap(m)
				if got := slices.Sorted(maps.Keys(l)); !slices.Equal(got, wantLabels) {
					t.Errorf("%s: labels %v, want %v", f.Name, got, wantLabels)
				}
				if simulated != (l["simulated"] == "true") {
					t.Errorf("%s: simulated label %q on simulated=%v", f.Name, l["simulated"], simulated)
				}
				if l["gpu"] == "3" {
					t.Errorf("%s: series for the lost GPU 3", f.Name)
				}
			}
		}
	}
}

func TestBuildSeriesPerDevice(t *testing.T) {
	fams := families(gather(t, metrics.NewGPUBuilder("node-a", "550.54.15", false), fixture()))
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
	if got := metrics.NewGPUBuilder("h", "d", false).Build(nil); len(got) != 0 {
		t.Errorf("Build(nil) = %d metrics, want none", len(got))
	}
}
