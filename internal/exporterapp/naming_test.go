package exporterapp_test

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// dcgmNames are the dcgm-exporter metrics gpuscale emits, with their types.
var dcgmNames = map[string]dto.MetricType{
	"DCGM_FI_DEV_GPU_UTIL":                    dto.MetricType_GAUGE,
	"DCGM_FI_DEV_MEM_COPY_UTIL":               dto.MetricType_GAUGE,
	"DCGM_FI_DEV_FB_USED":                     dto.MetricType_GAUGE,
	"DCGM_FI_DEV_FB_FREE":                     dto.MetricType_GAUGE,
	"DCGM_FI_DEV_FB_RESERVED":                 dto.MetricType_GAUGE,
	"DCGM_FI_DEV_FB_TOTAL":                    dto.MetricType_GAUGE,
	"DCGM_FI_DEV_GPU_TEMP":                    dto.MetricType_GAUGE,
	"DCGM_FI_DEV_MEMORY_TEMP":                 dto.MetricType_GAUGE,
	"DCGM_FI_DEV_POWER_USAGE":                 dto.MetricType_GAUGE,
	"DCGM_FI_DEV_POWER_MGMT_LIMIT":            dto.MetricType_GAUGE,
	"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":    dto.MetricType_COUNTER,
	"DCGM_FI_DEV_SM_CLOCK":                    dto.MetricType_GAUGE,
	"DCGM_FI_DEV_MEM_CLOCK":                   dto.MetricType_GAUGE,
	"DCGM_FI_DEV_XID_ERRORS":                  dto.MetricType_GAUGE,
	"DCGM_FI_DEV_ENC_UTIL":                    dto.MetricType_GAUGE,
	"DCGM_FI_DEV_DEC_UTIL":                    dto.MetricType_GAUGE,
	"DCGM_FI_DEV_PCIE_TX_THROUGHPUT":          dto.MetricType_COUNTER,
	"DCGM_FI_DEV_PCIE_RX_THROUGHPUT":          dto.MetricType_COUNTER,
	"DCGM_FI_DEV_PCIE_REPLAY_COUNTER":         dto.MetricType_COUNTER,
	"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL":      dto.MetricType_COUNTER,
	"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS":   dto.MetricType_COUNTER,
	"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": dto.MetricType_COUNTER,
	"DCGM_FI_DEV_ROW_REMAP_PENDING":           dto.MetricType_GAUGE,
	"DCGM_FI_DEV_ROW_REMAP_FAILURE":           dto.MetricType_GAUGE,
	"DCGM_FI_PROF_GR_ENGINE_ACTIVE":           dto.MetricType_GAUGE,
	"DCGM_FI_PROF_SM_ACTIVE":                  dto.MetricType_GAUGE,
	"DCGM_FI_PROF_SM_OCCUPANCY":               dto.MetricType_GAUGE,
	"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE":         dto.MetricType_GAUGE,
	"DCGM_FI_PROF_DRAM_ACTIVE":                dto.MetricType_GAUGE,
	"DCGM_FI_PROF_PCIE_TX_BYTES":              dto.MetricType_GAUGE,
	"DCGM_FI_PROF_PCIE_RX_BYTES":              dto.MetricType_GAUGE,
	"DCGM_FI_PROF_NVLINK_TX_BYTES":            dto.MetricType_GAUGE,
	"DCGM_FI_PROF_NVLINK_RX_BYTES":            dto.MetricType_GAUGE,
	"DCGM_FI_DEV_VGPU_LICENSE_STATUS":         dto.MetricType_GAUGE,
}

// dcgmLabelSet is dcgm-exporter's label set with pod attribution, plus
// simulated on the sim backend.
var dcgmLabelSet = []string{"DCGM_FI_DRIVER_VERSION", "GPU_I_ID", "GPU_I_PROFILE", "Hostname", "UUID",
	"container", "device", "gpu", "modelName", "namespace", "pci_bus_id", "pod", "simulated"}

// TestMetricNames scrapes a real exporter (sim backend as vGPU guests, MIG
// instances and pods attached, an XID recorded) and checks every family it emits: a
// dcgm-exporter name with exactly dcgm-exporter's labels, a gpuscale_ name,
// or Go and process runtime metrics.
func TestMetricNames(t *testing.T) {
	k := &fakeKubelet{}
	o := simOptions(serveKubelet(t, k))
	o.SimMIGProfiles = "3g.40gb,1g.10gb"
	o.SimVGPU = true
	p := start(t, o)
	base := "http://" + p.addr
	gpus := fetchGPUs(t, base)
	k.setPods(pod("llm", "vllm-0", "vllm", "nvidia.com/gpu", gpus.GPUs[0].UUID),
		pod("llm", "vllm-1", "vllm", "nvidia.com/mig-1g.10gb", gpus.GPUs[2].MIG.UUID))
	req, _ := http.NewRequest(http.MethodPut, base+"/api/v1/sim/gpus/1", strings.NewReader(`{"xid":79}`))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PUT xid: %v %v", resp, err)
	}

	var fams map[string]*dto.MetricFamily
	eventually(t, "a scrape with pods and XIDs", func() error {
		_, body := get(t, http.DefaultClient, base+"/metrics")
		var err error
		if fams, err = parseScrape(body); err != nil {
			return err
		}
		if !strings.Contains(body, `pod="vllm-1"`) || fams["gpuscale_gpu_xid_errors_total"] == nil {
			return fmt.Errorf("pods or XIDs not in the scrape yet")
		}
		return nil
	})
	seen := map[string]bool{}
	for name, mf := range fams {
		_, dcgm := dcgmNames[name]
		switch {
		case dcgm:
			seen[name] = true
			checkDCGMFamily(t, mf)
		case strings.HasPrefix(name, "gpuscale_"), strings.HasPrefix(name, "go_"), strings.HasPrefix(name, "process_"):
		default:
			t.Errorf("metric %s is neither dcgm-exporter's, gpuscale_ nor a runtime metric", name)
		}
	}
	for name := range dcgmNames {
		if !seen[name] {
			t.Errorf("the exporter does not emit %s", name)
		}
	}
	for _, want := range []string{"go_goroutines", "process_resident_memory_bytes", "gpuscale_gpu_up",
		"gpuscale_exporter_info", "gpuscale_exporter_collection_duration_seconds"} {
		if fams[want] == nil {
			t.Errorf("the exporter does not emit %s", want)
		}
	}
}

func checkDCGMFamily(t *testing.T, mf *dto.MetricFamily) {
	t.Helper()
	name := mf.GetName()
	if mf.GetType() != dcgmNames[name] {
		t.Errorf("%s: type %v, want %v", name, mf.GetType(), dcgmNames[name])
	}
	for _, m := range mf.GetMetric() {
		l := labels(m)
		if got := slices.Sorted(maps.Keys(l)); !slices.Equal(got, dcgmLabelSet) {
			t.Errorf("%s: labels %v, want %v", name, got, dcgmLabelSet)
			return
		}
		if l["simulated"] != "true" || l["Hostname"] != "node-test" || !strings.HasPrefix(l["device"], "nvidia") {
			t.Errorf("%s: labels %v", name, l)
		}
		v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
		switch name {
		case "DCGM_FI_DEV_FB_TOTAL":
			// MiB: a GPU has tens of thousands, not tens of billions.
			if v < 1000 || v > 1<<20 {
				t.Errorf("%s = %v: not in MiB", name, v)
			}
		case "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_POWER_MGMT_LIMIT":
			if v < 10 || v > 2000 {
				t.Errorf("%s = %v: not in W", name, v)
			}
		}
	}
}
