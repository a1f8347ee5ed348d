package httpapi_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpuscale/gpuscale/pkg/exporter"
	"github.com/gpuscale/gpuscale/pkg/exporter/backend/sim"
	"github.com/gpuscale/gpuscale/pkg/exporter/httpapi"
	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/metrics"
)

// simNode is the exporter's handler over a real collector and a simulated
// backend on a fake clock.
type simNode struct {
	h       http.Handler
	backend *sim.Backend
	col     *exporter.Collector
	now     time.Time
}

func newSimNode(t testing.TB, opts sim.Options) *simNode {
	t.Helper()
	n := &simNode{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	opts.Now = func() time.Time { return n.now }
	b, err := sim.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	col, err := exporter.NewCollector(exporter.Config{Backend: b, Hostname: "node-a", Interval: time.Second, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	// /metrics serves the collector's snapshot itself: not in reg.
	n.backend, n.col = b, col
	n.h = httpapi.New(httpapi.Config{
		Source: col, Gatherer: reg, Hostname: "node-a", Registerer: reg,
		APIRoutes: []httpapi.Routes{sim.NewLoadControl(b, func() { _ = col.CollectOnce(context.Background()) }, reg)},
	})
	return n
}

func (n *simNode) collect(t testing.TB) {
	t.Helper()
	if err := n.col.CollectOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// do serves one request and returns the response.
func do(t *testing.T, h http.Handler, method, path, body string, header ...string) *http.Response {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, r)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// parseText parses a text-format scrape into families by name.
func parseText(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse scrape: %v\n%s", err, body)
	}
	return mfs
}

func TestMetricsText(t *testing.T) {
	n := newSimNode(t, sim.Options{GPUs: 2})
	n.collect(t)
	resp := do(t, n.h, http.MethodGet, "/metrics", "")
	body := readBody(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type = %q, want text/plain", ct)
	}
	mfs := parseText(t, body)
	util := mfs["DCGM_FI_DEV_GPU_UTIL"]
	if len(util.GetMetric()) != 2 {
		t.Fatalf("DCGM_FI_DEV_GPU_UTIL has %d series, want 2", len(util.GetMetric()))
	}
	for _, m := range util.GetMetric() {
		found := false
		for _, lp := range m.GetLabel() {
			found = found || (lp.GetName() == "simulated" && lp.GetValue() == "true")
		}
		if !found {
			t.Errorf("simulated series without simulated=\"true\": %v", m.GetLabel())
		}
	}
	if mfs["gpuscale_exporter_info"] == nil {
		t.Error("no gpuscale_exporter_info")
	}
}

func TestMetricsOpenMetrics(t *testing.T) {
	n := newSimNode(t, sim.Options{GPUs: 1})
	n.collect(t)
	resp := do(t, n.h, http.MethodGet, "/metrics", "", "Accept", "application/openmetrics-text;version=1.0.0")
	body := readBody(t, resp)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Errorf("Content-Type = %q, want application/openmetrics-text", ct)
	}
	if !strings.HasSuffix(body, "# EOF\n") {
		t.Errorf("OpenMetrics body does not end with # EOF")
	}
	if !strings.Contains(body, "\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{") {
		t.Errorf("the energy counter must keep its dcgm-exporter name under OpenMetrics")
	}
}

// TestMetricsNegotiation: the handler writes only the two text formats, so
// a client asking for anything else (Prometheus's protobuf first, say) is
// answered in text, and says so in its Content-Type.
func TestMetricsNegotiation(t *testing.T) {
	n := newSimNode(t, sim.Options{GPUs: 1})
	n.collect(t)
	for _, tc := range []struct{ accept, want string }{
		{"", "text/plain"},
		{"application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited", "text/plain"},
		{"application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3", "text/plain"},
		{"application/openmetrics-text;version=0.0.1", "application/openmetrics-text"},
		{"application/openmetrics-text;version=1.0.0;q=0.5,text/plain;q=0.4", "application/openmetrics-text"},
	} {
		resp := do(t, n.h, http.MethodGet, "/metrics", "", "Accept", tc.accept)
		body := readBody(t, resp)
		ct := resp.Header.Get("Content-Type")
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, tc.want) {
			t.Errorf("Accept %q: status %d, Content-Type %q, want %s", tc.accept, resp.StatusCode, ct, tc.want)
		}
		if tc.want == "text/plain" {
			parseText(t, body)
		}
	}
}

// TestMetricUnits checks dcgm-exporter's units on an idle simulated H100
// after 10 s: framebuffer in MiB, power in W, energy in mJ.
func TestMetricUnits(t *testing.T) {
	n := newSimNode(t, sim.Options{GPUs: 1})
	n.now = n.now.Add(10 * time.Second)
	n.collect(t)
	mfs := parseText(t, readBody(t, do(t, n.h, http.MethodGet, "/metrics", "")))
	tests := []struct {
		name string
		want float64
	}{
		{"DCGM_FI_DEV_FB_TOTAL", 81559},                          // MiB, not bytes
		{"DCGM_FI_DEV_FB_RESERVED", 519},                         // MiB
		{"DCGM_FI_DEV_POWER_USAGE", 70},                          // W at idle, not mW
		{"DCGM_FI_DEV_POWER_MGMT_LIMIT", 700},                    // W
		{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 70 * 10 * 1000}, // 70 W for 10 s in mJ
		{"DCGM_FI_DEV_SM_CLOCK", 345},                            // MHz
	}
	for _, tc := range tests {
		mf := mfs[tc.name]
		if mf == nil || len(mf.GetMetric()) != 1 {
			t.Errorf("%s: %v", tc.name, mf)
			continue
		}
		m := mf.GetMetric()[0]
		got := m.GetGauge().GetValue() + m.GetCounter().GetValue()
		if got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := mfs["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].GetType(); got != dto.MetricType_COUNTER {
		t.Errorf("energy type = %v, want counter", got)
	}
}

// fakeSource is a SnapshotSource the test steers.
type fakeSource struct {
	snap    *exporter.Snapshot
	healthy bool
	age     time.Duration
}

func (f *fakeSource) Snapshot() *exporter.Snapshot   { return f.snap }
func (f *fakeSource) Healthy() (bool, time.Duration) { return f.healthy, f.age }

func TestProbes(t *testing.T) {
	snap := &exporter.Snapshot{Time: time.Now(), Backend: gpu.KindNVML}
	tests := []struct {
		name       string
		src        fakeSource
		path       string
		wantStatus int
		wantBody   string
	}{
		// Liveness answers whether the process serves at all: a driver
		// that does not answer is readiness's to report; restarting the
		// exporter would not unstick it.
		{"healthz before the first collection", fakeSource{}, "/healthz", 200, "ok"},
		{"healthz fresh", fakeSource{snap: snap, healthy: true}, "/healthz", 200, "ok"},
		{"healthz stale", fakeSource{snap: snap, age: time.Hour}, "/healthz", 200, "ok"},
		{"readyz before the first collection", fakeSource{}, "/readyz", 503, "no successful collection yet"},
		{"readyz fresh", fakeSource{snap: snap, healthy: true}, "/readyz", 200, "ok"},
		// NVML freshness is readiness: a collection over three intervals
		// old takes the exporter out of its Service.
		{"readyz stale", fakeSource{snap: snap, age: 4500 * time.Millisecond}, "/readyz", 503, "last successful collection 4.5s ago"},
		{"gpus before the first collection", fakeSource{}, "/api/v1/gpus", 503, `"error":"no successful collection yet"`},
	}
	for _, tc := range tests {
		h := httpapi.New(httpapi.Config{Source: &tc.src, Gatherer: prometheus.NewRegistry()})
		resp := do(t, h, http.MethodGet, tc.path, "")
		body := readBody(t, resp)
		if resp.StatusCode != tc.wantStatus || !strings.Contains(body, tc.wantBody) {
			t.Errorf("%s: %d %q, want %d containing %q", tc.name, resp.StatusCode, body, tc.wantStatus, tc.wantBody)
		}
	}
}

func TestReadyzAfterFirstCollection(t *testing.T) {
	n := newSimNode(t, sim.Options{GPUs: 1})
	if got := do(t, n.h, http.MethodGet, "/readyz", "").StatusCode; got != 503 {
		t.Errorf("/readyz before the first collection: %d, want 503", got)
	}
	n.collect(t)
	if got := do(t, n.h, http.MethodGet, "/readyz", "").StatusCode; got != 200 {
		t.Errorf("/readyz after the first collection: %d, want 200", got)
	}
	if got := do(t, n.h, http.MethodGet, "/healthz", "").StatusCode; got != 200 {
		t.Errorf("/healthz after the first collection: %d, want 200", got)
	}
}

func TestMethodsAndRoutes(t *testing.T) {
	nonSim := httpapi.New(httpapi.Config{Source: &fakeSource{}, Gatherer: prometheus.NewRegistry()})
	n := newSimNode(t, sim.Options{GPUs: 1})
	tests := []struct {
		name   string
		h      http.Handler
		method string
		path   string
		want   []int
	}{
		{"sim PUT on a non-sim backend", nonSim, http.MethodPut, "/api/v1/sim/gpus/0", []int{404, 405}},
		{"POST to the sim route", n.h, http.MethodPost, "/api/v1/sim/gpus/0", []int{405}},
		{"PUT /metrics", n.h, http.MethodPut, "/metrics", []int{405}},
		{"unknown path", n.h, http.MethodGet, "/nope", []int{404}},
	}
	for _, tc := range tests {
		got := do(t, tc.h, tc.method, tc.path, `{"utilization":1}`).StatusCode
		ok := false
		for _, w := range tc.want {
			ok = ok || got == w
		}
		if !ok {
			t.Errorf("%s: status %d, want one of %v", tc.name, got, tc.want)
		}
	}
}

// errLost is the error of the lost GPU in the JSON fixture.
var errLost = errors.New("GPU is lost")

func jsonSnapshot() *exporter.Snapshot {
	whole := gpu.Reading{Device: gpu.Device{Index: 0, Minor: 0, UUID: "GPU-0", ModelName: "NVIDIA H100 80GB HBM3", PCIBusID: "00000000:18:00.0"},
		XIDCounts: map[uint64]uint64{79: 2}}
	whole.Set(gpu.FieldGPUUtil, 42)
	whole.Set(gpu.FieldPowerUsage, 0) // present even though zero
	mig := gpu.Reading{Device: whole.Device}
	mig.XIDCounts = nil
	mig.Device.MIG = &gpu.MIG{UUID: "MIG-1", GPUInstanceID: 3, ComputeInstanceID: 0, Profile: "1g.10gb"}
	mig.Set(gpu.FieldFBUsed, 100)
	lost := gpu.Reading{Device: gpu.Device{Index: 1, Minor: 1, UUID: "GPU-1"}, Err: errLost}
	return &exporter.Snapshot{
		Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Backend: gpu.KindSim, Driver: "550.54.15-sim",
		Devices: []metrics.DeviceState{
			{Reading: whole},
			{Reading: mig, Pods: []metrics.PodRef{{Namespace: "llm", Pod: "vllm-0", Container: "vllm"}}},
			{Reading: lost},
		},
	}
}
