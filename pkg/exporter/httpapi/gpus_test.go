package httpapi_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscale/gpuscale/pkg/exporter/backend/sim"
	"github.com/gpuscale/gpuscale/pkg/exporter/httpapi"
	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// TestGPUsJSONShape decodes into generic maps so that the field names and
// what is omitted are checked, not just the Go types.
func TestGPUsJSONShape(t *testing.T) {
	h := httpapi.New(httpapi.Config{Source: &fakeSource{snap: jsonSnapshot(), healthy: true},
		Gatherer: prometheus.NewRegistry(), Hostname: "node-a"})
	resp := do(t, h, http.MethodGet, "/api/v1/gpus", "")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var node map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&node); err != nil {
		t.Fatal(err)
	}
	wantTop := map[string]any{"time": "2025-01-02T03:04:05Z", "hostname": "node-a", "backend": "sim",
		"simulated": true, "driverVersion": "550.54.15-sim"}
	for k, v := range wantTop {
		if node[k] != v {
			t.Errorf("%s = %v, want %v", k, node[k], v)
		}
	}
	gpus, _ := node["gpus"].([]any)
	if len(gpus) != 3 {
		t.Fatalf("gpus = %v, want 3 entries", node["gpus"])
	}
	whole, mig, lost := gpus[0].(map[string]any), gpus[1].(map[string]any), gpus[2].(map[string]any)

	wantWhole := map[string]any{
		"index": 0.0, "uuid": "GPU-0", "device": "nvidia0", "modelName": "NVIDIA H100 80GB HBM3",
		"pciBusId": "00000000:18:00.0", "healthy": true,
		"values":    map[string]any{"gpu_util": 42.0, "power_usage_w": 0.0},
		"xidCounts": map[string]any{"79": 2.0},
		"pods":      []any{},
	}
	if !reflect.DeepEqual(whole, wantWhole) {
		t.Errorf("whole GPU:\n got %v\nwant %v", whole, wantWhole)
	}
	wantMIG := map[string]any{"uuid": "MIG-1", "gpuInstanceId": 3.0, "computeInstanceId": 0.0, "profile": "1g.10gb"}
	if !reflect.DeepEqual(mig["mig"], wantMIG) {
		t.Errorf("mig = %v, want %v", mig["mig"], wantMIG)
	}
	if !reflect.DeepEqual(mig["values"], map[string]any{"fb_used_mib": 100.0}) {
		t.Errorf("MIG values = %v, want only fb_used_mib", mig["values"])
	}
	wantPods := []any{map[string]any{"namespace": "llm", "pod": "vllm-0", "container": "vllm"}}
	if !reflect.DeepEqual(mig["pods"], wantPods) {
		t.Errorf("MIG pods = %v, want %v", mig["pods"], wantPods)
	}
	if _, ok := mig["xidCounts"]; ok {
		t.Error("xidCounts present without XIDs")
	}
	if lost["healthy"] != false || lost["error"] != errLost.Error() {
		t.Errorf("lost GPU: healthy %v error %v", lost["healthy"], lost["error"])
	}
	if v, ok := lost["values"].(map[string]any); !ok || len(v) != 0 {
		t.Errorf("lost GPU values = %v, want {}", lost["values"])
	}
	for _, absent := range []string{"mig", "error"} {
		if _, ok := whole[absent]; ok {
			t.Errorf("whole healthy GPU has %q", absent)
		}
	}
}

func TestSimPut(t *testing.T) {
	n := newSimNode(t, sim.Options{GPUs: 2, MIGProfiles: []string{"1g.10gb"}})
	n.collect(t)
	tests := []struct {
		name, gpu, body string
		want            int
		wantErr         string
	}{
		{"malformed JSON", "0", `{"utilization":`, 400, "invalid body"},
		{"not an object", "0", `[1]`, 400, "invalid body"},
		{"empty body", "0", ``, 400, "invalid body"},
		{"unknown field", "0", `{"util":50}`, 400, "unknown field"},
		{"wrong type", "0", `{"utilization":"high"}`, 400, "invalid body"},
		{"utilization out of range", "0", `{"utilization":101}`, 400, "outside 0-100"},
		{"negative memory", "0", `{"memoryUsedMiB":-1}`, 400, "0 or more"},
		{"too much memory", "0", `{"memoryUsedMiB":1e9}`, 400, "exceeds"},
		{"oversized body", "0", `{"utilization":1` + strings.Repeat(" ", 5000) + `}`, 413, "larger than 4096 bytes"},
		{"oversized trailing data", "0", `{"utilization":1}` + strings.Repeat(" ", 5000) + `x`, 413, "larger than 4096 bytes"},
		{"null", "0", `null`, 400, "invalid body: null"},
		{"second object", "0", `{"utilization":1}{"utilization":2}`, 400, "data after the JSON object"},
		{"trailing garbage", "0", `{"utilization":1} garbage`, 400, "data after the JSON object"},
		{"trailing brace", "0", `{"utilization":1}}`, 400, "data after the JSON object"},
		{"trailing number", "0", "{\"utilization\":1}\n2", 400, "data after the JSON object"},
		{"number too large for a float", "0", `{"utilization":1e400}`, 400, "invalid body"},
		{"negative XID", "0", `{"xid":-1}`, 400, "invalid body"},
		{"XID above the code range", "0", `{"xid":256}`, 400, "outside 1-255"},
		{"utilization with too much memory", "0", `{"utilization":50,"memoryUsedMiB":1e9}`, 400, "exceeds"},
		{"GPU memory its MIG instances hold", "0", `{"memoryUsedMiB":81040}`, 400, "outside its MIG instances"},
		{"unknown GPU index", "7", `{"utilization":50}`, 404, "no such simulated GPU"},
		{"unknown GPU UUID", "GPU-nope", `{"utilization":50}`, 404, "no such simulated GPU"},
	}
	wantRejected := map[string]float64{}
	for _, tc := range tests {
		resp := do(t, n.h, http.MethodPut, "/api/v1/sim/gpus/"+tc.gpu, tc.body, "Content-Type", "application/json")
		var e struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		if resp.StatusCode != tc.want || !strings.Contains(e.Error, tc.wantErr) {
			t.Errorf("%s: %d %q, want %d mentioning %q", tc.name, resp.StatusCode, e.Error, tc.want, tc.wantErr)
		}
		wantRejected[strconv.Itoa(tc.want)]++
	}
	if got := gpuValue(t, n, 0, "gpu_util"); got != 0.0 {
		t.Errorf("rejected requests changed GPU 0's utilization to %v", got)
	}
	mfs := parseText(t, readBody(t, do(t, n.h, http.MethodGet, "/metrics", "")))
	gotRejected := map[string]float64{}
	for _, m := range mfs["gpuscale_exporter_sim_load_rejected_total"].GetMetric() {
		gotRejected[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
	}
	if !reflect.DeepEqual(gotRejected, wantRejected) {
		t.Errorf("gpuscale_exporter_sim_load_rejected_total by code = %v, want %v", gotRejected, wantRejected)
	}

	// White space after the object is fine.
	if resp := do(t, n.h, http.MethodPut, "/api/v1/sim/gpus/0", "{\"utilization\":5}\r\n \t"); resp.StatusCode != http.StatusNoContent {
		t.Errorf("object then white space: status %d: %s", resp.StatusCode, readBody(t, resp))
	}
}

func TestSimPutIsVisible(t *testing.T) {
	n := newSimNode(t, sim.Options{GPUs: 2, MIGProfiles: []string{"1g.10gb"}})
	n.collect(t)
	migUUID := gpuEntry(t, n, 3)["mig"].(map[string]any)["uuid"].(string)
	tests := []struct {
		name, gpu, body string
		entry           int
		field           string
		want            any
	}{
		{"utilization by index", "1", `{"utilization":75}`, 2, "gpu_util", 75.0},
		{"memory of a MIG instance", migUUID, `{"memoryUsedMiB":2048}`, 3, "fb_used_mib", 2048.0},
		{"XID", "0", `{"xid":79}`, 0, "last_xid", 79.0},
	}
	for _, tc := range tests {
		resp := do(t, n.h, http.MethodPut, "/api/v1/sim/gpus/"+tc.gpu, tc.body)
		if resp.StatusCode != http.StatusNoContent {
			t.Errorf("%s: status %d: %s", tc.name, resp.StatusCode, readBody(t, resp))
			continue
		}
		// No CollectOnce here: the handler's Collect hook refreshes.
		if got := gpuEntry(t, n, tc.entry)["values"].(map[string]any)[tc.field]; got != tc.want {
			t.Errorf("%s: %s = %v, want %v", tc.name, tc.field, got, tc.want)
		}
	}
	if resp := do(t, n.h, http.MethodPut, "/api/v1/sim/gpus/1", `{"fail":true}`); resp.StatusCode != 204 {
		t.Fatalf("fail: status %d", resp.StatusCode)
	}
	if e := gpuEntry(t, n, 2); e["healthy"] != false || e["error"] == nil {
		t.Errorf("GPU 1 after fail:true: %v", e)
	}
	if resp := do(t, n.h, http.MethodPut, "/api/v1/sim/gpus/1", `{"fail":false}`); resp.StatusCode != 204 {
		t.Fatalf("recover: status %d", resp.StatusCode)
	}
	if e := gpuEntry(t, n, 2); e["healthy"] != true {
		t.Errorf("GPU 1 after fail:false: %v", e)
	}
}

// gpuEntry returns entry i of GET /api/v1/gpus.
func gpuEntry(t *testing.T, n *simNode, i int) map[string]any {
	t.Helper()
	var node struct{ GPUs []map[string]any }
	resp := do(t, n.h, http.MethodGet, "/api/v1/gpus", "")
	if err := json.NewDecoder(resp.Body).Decode(&node); err != nil {
		t.Fatal(err)
	}
	if i >= len(node.GPUs) {
		t.Fatalf("entry %d of %d", i, len(node.GPUs))
	}
	return node.GPUs[i]
}

func gpuValue(t *testing.T, n *simNode, i int, field string) any {
	t.Helper()
	return gpuEntry(t, n, i)["values"].(map[string]any)[field]
}

// TestXIDFloodBounded sends a GPU thousands of distinct XID codes through
// the API: out-of-range ones are refused with 400, and the exported
// per-code counter never holds more than gpu.MaxXIDCodes series.
func TestXIDFloodBounded(t *testing.T) {
	n := newSimNode(t, sim.Options{GPUs: 1})
	n.collect(t)
	accepted := 0
	for code := 1; code <= 5000; code++ {
		resp := do(t, n.h, http.MethodPut, "/api/v1/sim/gpus/0", `{"xid":`+strconv.Itoa(code)+`}`)
		switch resp.StatusCode {
		case http.StatusNoContent:
			accepted++
		case http.StatusBadRequest:
		default:
			t.Fatalf("xid %d: status %d: %s", code, resp.StatusCode, readBody(t, resp))
		}
	}
	mfs := parseText(t, readBody(t, do(t, n.h, http.MethodGet, "/metrics", "")))
	series := len(mfs["gpuscale_gpu_xid_errors_total"].GetMetric())
	// Codes 1 to 32 were accepted, none fatal: the fatal codes' series at
	// 0 come on top.
	if want := gpu.MaxXIDCodes + len(gpu.FatalXIDs); series != want || accepted != gpu.MaxXIDCodes {
		t.Errorf("%d codes accepted, %d gpuscale_gpu_xid_errors_total series; want %d and %d", accepted, series, gpu.MaxXIDCodes, want)
	}
}
