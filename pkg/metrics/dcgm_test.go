package metrics_test

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/gpu/dcgm"
	"github.com/gpuscale/gpuscale/pkg/metrics"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

func device(index int, mig *gpu.MIG) gpu.Device {
	return gpu.Device{
		Index: index, Minor: index, ModelName: "NVIDIA H100 80GB HBM3",
		UUID:     "GPU-0000000" + string(rune('0'+index)) + "-aaaa-bbbb-cccc-dddddddddddd",
		PCIBusID: "00000000:" + string(rune('1'+index)) + "8:00.0",
		MIG:      mig,
	}
}

// wholeGPU is a fully reported GPU.
func wholeGPU(index int, util float64, usedMiB float64) gpu.Reading {
	r := gpu.Reading{Device: device(index, nil)}
	for f, v := range map[gpu.Field]float64{
		gpu.FieldGPUUtil: util, gpu.FieldMemCopyUtil: util / 2,
		gpu.FieldFBUsed: usedMiB, gpu.FieldFBFree: 81559 - 519 - usedMiB, gpu.FieldFBReserved: 519, gpu.FieldFBTotal: 81559,
		gpu.FieldGPUTemp: 41, gpu.FieldMemoryTemp: 47, gpu.FieldPowerUsage: 312.5, gpu.FieldPowerLimit: 700,
		gpu.FieldEnergy: 123456789, gpu.FieldSMClock: 1980, gpu.FieldMemClock: 2619, gpu.FieldLastXID: 0,
		gpu.FieldEncUtil: 3, gpu.FieldDecUtil: 4, gpu.FieldPCIeTxThroughput: 1200, gpu.FieldPCIeRxThroughput: 3400,
		gpu.FieldPCIeReplay: 2, gpu.FieldNVLinkBandwidth: 5e9, gpu.FieldRemappedRowsCorrectable: 1,
		gpu.FieldRemappedRowsUncorrectable: 0, gpu.FieldRowRemapPending: 0, gpu.FieldRowRemapFailure: 0,
		gpu.FieldVGPULicensed: 1, gpu.FieldGREngineActive: util / 100, gpu.FieldSMActive: util / 110,
		gpu.FieldSMOccupancy: util / 200, gpu.FieldTensorActive: util / 150, gpu.FieldDRAMActive: util / 120,
		gpu.FieldPCIeTxBytes: 1.5e9, gpu.FieldPCIeRxBytes: 2.5e9, gpu.FieldNVLinkTxBytes: 4e9, gpu.FieldNVLinkRxBytes: 4.5e9,
		gpu.FieldPowerMgmtLimit: 650, gpu.FieldECCSBEVolatile: 3, gpu.FieldECCDBEVolatile: 0, gpu.FieldECCSBEAggregate: 12,
		gpu.FieldECCDBEAggregate: 1, gpu.FieldRetiredPagesSBE: 2, gpu.FieldRetiredPagesDBE: 1, gpu.FieldRetiredPending: 0,
		gpu.FieldPowerViolation: 1.5e9, gpu.FieldThermalViolation: 2e8, gpu.FieldSyncBoostViolation: 0,
		gpu.FieldBoardLimitViolation: 0, gpu.FieldLowUtilViolation: 7e10, gpu.FieldReliabilityViolation: 0,
		gpu.FieldNVLinkCRCFlitErrors: 4, gpu.FieldNVLinkCRCDataErrors: 1, gpu.FieldNVLinkReplayErrors: 9,
		gpu.FieldNVLinkRecoveryErrors: 0, gpu.FieldFabricHealthSummary: 1, gpu.FieldFabricHealthMask: 0,
		gpu.FieldFP64Active: util / 400, gpu.FieldFP32Active: util / 300, gpu.FieldFP16Active: util / 250,
	} {
		r.Set(f, v)
	}
	return r
}

func migInstance(parent, gi int, profile string, usedMiB, totalMiB float64) gpu.Reading {
	r := gpu.Reading{Device: device(parent, &gpu.MIG{
		UUID:          "MIG-" + string(rune('0'+parent)) + string(rune('0'+gi)) + "000000-1111-2222-3333-444444444444",
		GPUInstanceID: gi, Profile: profile,
	})}
	r.Set(gpu.FieldFBUsed, usedMiB)
	r.Set(gpu.FieldFBFree, totalMiB-usedMiB)
	r.Set(gpu.FieldFBTotal, totalMiB)
	return r
}

// fixture is a node with every shape of device the builder must render:
// GPU 0 split into two MIG instances, each held by a pod; GPU 1 time-sliced
// between two pods, with XID errors; GPU 2 unallocated; GPU 3 lost.
func fixture() []metrics.DeviceState {
	timeSliced := wholeGPU(1, 87, 30000)
	timeSliced.Set(gpu.FieldLastXID, 79)
	timeSliced.XIDCounts = map[uint64]uint64{79: 2, 13: 1}
	lost := gpu.Reading{Device: device(3, nil), Err: errors.New("GPU is lost")}
	return []metrics.DeviceState{
		{Reading: wholeGPU(0, 55, 20000)},
		{Reading: migInstance(0, 1, "3g.40gb", 15000, 39321),
			Pods: []metrics.PodRef{{Namespace: "llm", Pod: "vllm-0", Container: "vllm"}}},
		{Reading: migInstance(0, 2, "1g.10gb", 5000, 9830),
			Pods: []metrics.PodRef{{Namespace: "batch", Pod: "embed-7f9c", Container: "worker"}}},
		{Reading: timeSliced, XIDWindow: map[uint64]uint64{79: 1}, Pods: []metrics.PodRef{
			{Namespace: "team-a", Pod: "notebook-a", Container: "jupyter"},
			{Namespace: "team-b", Pod: "notebook-b", Container: "jupyter"},
		}},
		{Reading: wholeGPU(2, 0, 0), XIDWindow: map[uint64]uint64{}},
		{Reading: lost, Pods: []metrics.PodRef{{Namespace: "llm", Pod: "orphan", Container: "c"}}},
	}
}

// pods is a PodMetadata over a fixed set of pods.
type pods map[string]metrics.PodMeta

func (p pods) PodMeta(namespace, pod string) (metrics.PodMeta, bool) {
	m, ok := p[namespace+"/"+pod]
	return m, ok
}

// parseText parses a text exposition as Prometheus would.
func parseText(b []byte) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(bytes.NewReader(b))
}

// build renders the fixture with b, and checks that its text form parses.
func build(t *testing.T, b *metrics.GPUBuilder, states []metrics.DeviceState) []*dto.MetricFamily {
	t.Helper()
	mfs := b.Build(states, nil)
	if _, err := parseText(encode(t, mfs, expfmt.NewFormat(expfmt.TypeTextPlain))); err != nil {
		t.Fatalf("the text exposition does not parse: %v", err)
	}
	return mfs
}

func encode(t *testing.T, mfs []*dto.MetricFamily, format expfmt.Format) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, format)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatalf("encode %s: %v", mf.GetName(), err)
		}
	}
	if c, ok := enc.(expfmt.Closer); ok {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestGolden(t *testing.T) {
	text, om := expfmt.NewFormat(expfmt.TypeTextPlain), expfmt.NewFormat(expfmt.TypeOpenMetrics)
	tests := []struct {
		golden    string
		schema    dcgm.Schema
		simulated bool
		format    expfmt.Format
	}{
		{"node.golden", dcgm.Schema48, false, text},
		{"node-4.10.golden", dcgm.Schema410, false, text},
		{"node-sim.golden", dcgm.Schema48, true, text},
		// OpenMetrics types a counter without _total as unknown but keeps
		// its name, so DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION survives.
		{"node.openmetrics.golden", dcgm.Schema48, false, om},
		{"node-4.10.openmetrics.golden", dcgm.Schema410, false, om},
	}
	for _, tc := range tests {
		t.Run(tc.golden, func(t *testing.T) {
			b := metrics.NewGPUBuilder(metrics.Options{Schema: tc.schema, Hostname: "node-a", DriverVersion: "550.54.15",
				Simulated: tc.simulated, XIDCountWindow: 5 * time.Minute})
			got := encode(t, build(t, b, fixture()), tc.format)
			path := filepath.Join("testdata", tc.golden)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("exposition differs from %s (go test -update rewrites it):\n%s", path, lineDiff(string(want), string(got)))
			}
		})
	}
}

// lineDiff lists the lines only one side has; enough to read a golden
// mismatch without a diff library.
func lineDiff(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var out strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			out.WriteString("- " + l + "\n")
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			out.WriteString("+ " + l + "\n")
		}
	}
	return out.String()
}
