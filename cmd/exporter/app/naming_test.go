package app_test

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/gpu/dcgm"
)

// dcgmNames are the dcgm-exporter metrics gpuscale emits in schema s, with
// their types: every field of package dcgm that s names (the simulated
// backend, as vGPU guests, reports them all), and DCGM_EXP_XID_ERRORS_COUNT.
func dcgmNames(s dcgm.Schema) map[string]dto.MetricType {
	out := map[string]dto.MetricType{dcgm.XIDErrorsCount: dto.MetricType_GAUGE}
	for _, f := range gpu.DCGMFields() {
		if n := f.Name(s); n != "" {
			out[n] = dto.MetricType_GAUGE
			if f.Type == dcgm.Counter {
				out[n] = dto.MetricType_COUNTER
			}
		}
	}
	return out
}

// dcgmLabelSet is each schema's label set with pod attribution, plus
// simulated on the sim backend.
var dcgmLabelSet = map[dcgm.Schema][]string{
	dcgm.Schema48: {"DCGM_FI_DRIVER_VERSION", "GPU_I_ID", "GPU_I_PROFILE", "Hostname", "UUID",
		"container", "device", "gpu", "hostname", "modelName", "namespace", "pci_bus_id", "pod", "simulated"},
	dcgm.Schema410: {"DCGM_FI_SYSTEM_DRIVER_VERSION", "GPU_I_ID", "GPU_I_PROFILE", "UUID",
		"container", "device", "gpu", "hostname", "modelName", "namespace", "pci_bus_id", "pod", "simulated"},
}

// TestMetricNames scrapes a real exporter (sim backend as vGPU guests, MIG
// instances and pods attached, an XID recorded) in each naming schema and
// checks every family it emits: a dcgm-exporter name of that schema with
// exactly its labels, a gpuscale_ name, or Go and process runtime metrics;
// and every field of dcgm-exporter 4.10's shipped default collector is
// among them, under its name in the schema.
func TestMetricNames(t *testing.T) {
	for _, schema := range dcgm.Schemas {
		t.Run(schema.String(), func(t *testing.T) { testMetricNames(t, schema) })
	}
}

func testMetricNames(t *testing.T, schema dcgm.Schema) {
	k := &fakeKubelet{}
	o := simOptions(serveKubelet(t, k))
	o.SimMIGProfiles = "3g.40gb,1g.10gb"
	o.SimVGPU = true
	o.DCGMSchema = schema.String()
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
		if !strings.Contains(body, `pod="vllm-1"`) || fams["gpuscale_gpu_xid_errors_total"] == nil ||
			!strings.Contains(body, `xid="79"`) {
			return fmt.Errorf("pods or XIDs not in the scrape yet")
		}
		return nil
	})
	names := dcgmNames(schema)
	seen := map[string]bool{}
	for name, mf := range fams {
		_, isDCGM := names[name]
		switch {
		case isDCGM:
			seen[name] = true
			checkDCGMFamily(t, schema, names, mf)
		case strings.HasPrefix(name, "gpuscale_"), strings.HasPrefix(name, "go_"), strings.HasPrefix(name, "process_"):
		default:
			t.Errorf("metric %s is neither dcgm-exporter %s's, gpuscale_ nor a runtime metric", name, schema)
		}
	}
	for name := range names {
		if !seen[name] {
			t.Errorf("the exporter does not emit %s", name)
		}
	}
	defaults := 0
	for _, f := range gpu.DCGMFields() {
		if f.Default410 {
			defaults++
			if !seen[f.Name(schema)] {
				t.Errorf("dcgm-exporter 4.10's default field %s is not served as %s", f.Name410, f.Name(schema))
			}
		}
	}
	if defaults != 26 {
		t.Errorf("%d fields in dcgm-exporter 4.10's default collector, want 26 (docs/dcgm-compatibility.md)", defaults)
	}
	for _, want := range []string{"go_goroutines", "process_resident_memory_bytes", "gpuscale_gpu_up",
		"gpuscale_exporter_info", "gpuscale_exporter_collection_duration_seconds"} {
		if fams[want] == nil {
			t.Errorf("the exporter does not emit %s", want)
		}
	}
}

func checkDCGMFamily(t *testing.T, schema dcgm.Schema, names map[string]dto.MetricType, mf *dto.MetricFamily) {
	t.Helper()
	name := mf.GetName()
	if mf.GetType() != names[name] {
		t.Errorf("%s: type %v, want %v", name, mf.GetType(), names[name])
	}
	want := dcgmLabelSet[schema]
	if name == dcgm.XIDErrorsCount {
		want = slices.Sorted(slices.Values(append(slices.Clone(want), "window_size_in_ms")))
	}
	for _, m := range mf.GetMetric() {
		l := labels(m)
		got := slices.Sorted(maps.Keys(l))
		if name == dcgm.XIDErrorsCount {
			got = slices.DeleteFunc(got, func(s string) bool { return s == "xid" })
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: labels %v, want %v", name, got, want)
			return
		}
		if l["simulated"] != "true" || l["hostname"] != "node-test" || !strings.HasPrefix(l["device"], "nvidia") {
			t.Errorf("%s: labels %v", name, l)
		}
		v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
		switch name {
		case "DCGM_FI_DEV_FB_TOTAL":
			// MiB: a GPU has tens of thousands, not tens of billions.
			if v < 1000 || v > 1<<20 {
				t.Errorf("%s = %v: not in MiB", name, v)
			}
		case "DCGM_FI_DEV_FB_CAPACITY_BYTES":
			if v < 1<<30 {
				t.Errorf("%s = %v: not in bytes", name, v)
			}
		case "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_POWER_MGMT_LIMIT", "DCGM_FI_DEV_BOARD_POWER_WATTS":
			if v < 10 || v > 2000 {
				t.Errorf("%s = %v: not in W", name, v)
			}
		case "DCGM_FI_DEV_SM_CLOCK_HERTZ":
			if v < 1e8 {
				t.Errorf("%s = %v: not in Hz", name, v)
			}
		}
	}
}

// TestCollectorsFile: --collectors selects the fields served, by either
// schema's names, as dcgm-exporter's collector CSV does.
func TestCollectorsFile(t *testing.T) {
	csv := filepath.Join(t.TempDir(), "collectors.csv")
	if err := os.WriteFile(csv, []byte("# Format\nDCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"+
		"DCGM_FI_DEV_FB_USED_BYTES, gauge, used\nDCGM_EXP_GPU_HEALTH_STATUS, gauge, skipped with a warning\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := simOptions("")
	o.Collectors = csv
	o.DCGMSchema = "4.10"
	p := start(t, o)
	var fams map[string]*dto.MetricFamily
	eventually(t, "a scrape", func() error {
		_, body := get(t, http.DefaultClient, "http://"+p.addr+"/metrics")
		var err error
		fams, err = parseScrape(body)
		if err == nil && fams["gpuscale_gpu_up"] == nil {
			err = fmt.Errorf("no collection yet")
		}
		return err
	})
	var got []string
	for name := range fams {
		if strings.HasPrefix(name, "DCGM_") {
			got = append(got, name)
		}
	}
	slices.Sort(got)
	if want := []string{"DCGM_FI_DEV_FB_USED_BYTES", "DCGM_FI_DEV_GPU_UTIL_RATIO"}; !slices.Equal(got, want) {
		t.Errorf("served %v, want %v", got, want)
	}
}
