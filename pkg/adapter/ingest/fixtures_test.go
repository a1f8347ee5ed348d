package ingest

import (
	"bytes"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/common/expfmt"

	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/gpu/dcgm"
	"github.com/gpuscale/gpuscale/pkg/metrics"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

var updateFixtures = flag.Bool("update", false, "rewrite testdata/gpuscale-*.prom")

// fixtureGPU is one GPU of the state testdata/dcgm-exporter-*.prom hold.
type fixtureGPU struct {
	uuid, bus                      string
	util, used, free, reserved     float64 // %, MiB
	power, gr, tensor, dram, smAct float64
	pods                           []metrics.PodRef
	// The rest of dcgm-exporter's default fields, which the adapter does
	// not read but the dashboards do.
	memCopy, enc, dec, temp, memTemp, energy, smClock, memClock, replay, xid, remapCorr, txBytes, rxBytes float64
}

// fixtureState is the node the dcgm-exporter fixtures were written from:
// GPU 0 held by one pod, GPU 1 time-sliced between two, GPU 2 idle.
var fixtureState = []fixtureGPU{
	{"GPU-5f1a9c2e-7d4b-4b6e-9a31-0c8e2f6d1a01", "00000000:18:00.0", 87, 61440, 19600, 519, 512.345, 0.83, 0.41, 0.37, 0.78,
		[]metrics.PodRef{{Namespace: "llm", Pod: "vllm-0", Container: "vllm"}},
		41, 0, 0, 63, 71, 123456789012, 1980, 2619, 0, 0, 0, 1.2e9, 2.4e9},
	{"GPU-5f1a9c2e-7d4b-4b6e-9a31-0c8e2f6d1a02", "00000000:2A:00.0", 35, 30720, 50320, 519, 231.5, 0.33, 0.12, 0.21, 0.29,
		[]metrics.PodRef{{Namespace: "team-a", Pod: "nb-a", Container: "jupyter"}, {Namespace: "team-b", Pod: "nb-b", Container: "jupyter"}},
		12, 3, 7, 48, 55, 98765432101, 1755, 2619, 2, 13, 1, 3e8, 4.5e8},
	{"GPU-5f1a9c2e-7d4b-4b6e-9a31-0c8e2f6d1a03", "00000000:3A:00.0", 0, 0, 81040, 519, 69.875, 0, 0, 0, 0, nil,
		0, 0, 0, 31, 38, 55555555555, 345, 2619, 0, 0, 0, 0, 0},
}

// gpuscaleExposition renders fixtureState as gpuscale's exporter does in
// schema s.
func gpuscaleExposition(t *testing.T, s dcgm.Schema) []byte {
	t.Helper()
	states := make([]metrics.DeviceState, len(fixtureState))
	for i, g := range fixtureState {
		r := gpu.Reading{Device: gpu.Device{Index: i, Minor: i, UUID: g.uuid, PCIBusID: g.bus, ModelName: "NVIDIA H100 80GB HBM3"}}
		for f, v := range map[gpu.Field]float64{
			gpu.FieldGPUUtil: g.util, gpu.FieldFBUsed: g.used, gpu.FieldFBFree: g.free, gpu.FieldFBReserved: g.reserved,
			gpu.FieldFBTotal: g.used + g.free + g.reserved, gpu.FieldPowerUsage: g.power, gpu.FieldGREngineActive: g.gr,
			gpu.FieldTensorActive: g.tensor, gpu.FieldDRAMActive: g.dram, gpu.FieldSMActive: g.smAct,
			gpu.FieldMemCopyUtil: g.memCopy, gpu.FieldEncUtil: g.enc, gpu.FieldDecUtil: g.dec, gpu.FieldGPUTemp: g.temp,
			gpu.FieldMemoryTemp: g.memTemp, gpu.FieldEnergy: g.energy, gpu.FieldSMClock: g.smClock, gpu.FieldMemClock: g.memClock,
			gpu.FieldPCIeReplay: g.replay, gpu.FieldLastXID: g.xid, gpu.FieldRemappedRowsCorrectable: g.remapCorr,
			gpu.FieldRemappedRowsUncorrectable: 0, gpu.FieldRowRemapFailure: 0, gpu.FieldNVLinkBandwidth: 0,
			gpu.FieldPCIeTxBytes: g.txBytes, gpu.FieldPCIeRxBytes: g.rxBytes, gpu.FieldPowerMgmtLimit: 700,
		} {
			r.Set(f, v)
		}
		r.XIDCounts = map[uint64]uint64{}
		if g.xid != 0 {
			r.XIDCounts[uint64(g.xid)] = 1
		}
		states[i] = metrics.DeviceState{Reading: r, Pods: g.pods}
	}
	b := metrics.NewGPUBuilder(metrics.Options{Schema: s, Hostname: "gpu-node-1", DriverVersion: "570.124.06"})
	var buf bytes.Buffer
	for _, mf := range b.Build(states, nil) {
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// TestSignalsEqualAcrossSchemas: the adapter's GPU signals of every pod
// and of the node are the same, to 1e-9, whichever exporter served the
// GPU state: gpuscale's in its 4.8 or its 4.10 mode, or dcgm-exporter
// 4.8.2 (Hostname), 4.8.4 (hostname, no driver label) or 4.10.0 (DCGM 4.7
// names and units).
func TestSignalsEqualAcrossSchemas(t *testing.T) {
	sources := map[string][]byte{
		"gpuscale --dcgm-schema=4.8":  gpuscaleExposition(t, dcgm.Schema48),
		"gpuscale --dcgm-schema=4.10": gpuscaleExposition(t, dcgm.Schema410),
	}
	// test/dashboards evaluates the PromQL defaults over the same five
	// expositions: keep gpuscale's two in testdata, equal to what it
	// renders.
	for schema, name := range map[string]string{"4.8": "gpuscale-4.8.prom", "4.10": "gpuscale-4.10.prom"} {
		path := filepath.Join("testdata", name)
		got := sources["gpuscale --dcgm-schema="+schema]
		if *updateFixtures {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if want, err := os.ReadFile(path); err != nil || !bytes.Equal(want, got) {
			t.Errorf("%s differs from what gpuscale renders (go test -run TestSignalsEqualAcrossSchemas -update rewrites it): %v", path, err)
		}
	}
	for _, v := range []string{"4.8.2", "4.8.4", "4.10.0"} {
		b, err := os.ReadFile(filepath.Join("testdata", "dcgm-exporter-"+v+".prom"))
		if err != nil {
			t.Fatal(err)
		}
		sources["dcgm-exporter "+v] = b
	}
	type result struct {
		pods map[store.Key]store.Sample
		node store.Sample
	}
	results := map[string]result{}
	for name, b := range sources {
		pods, node, rejected, err := GPU(parse(t, string(b)))
		if err != nil || len(rejected) != 0 {
			t.Fatalf("%s: err %v, rejected %v", name, err, rejected)
		}
		results[name] = result{pods, node}
	}
	ref := results["gpuscale --dcgm-schema=4.8"]
	// The reference itself: what the state says, so that five equal
	// wrong answers cannot pass.
	wantNode := map[signal.Signal]float64{
		signal.GPUUtilization:     (87 + 35 + 0) / 3.0,
		signal.GPUMemoryUsedBytes: (61440 + 30720) * mib,
		signal.GPUPowerWatts:      512.345 + 231.5 + 69.875,
		signal.GPUSMActive:        100 * (0.78 + 0.29) / 3,
		signal.GPUTensorActive:    100 * (0.41 + 0.12) / 3,
	}
	for sig, want := range wantNode {
		if got, ok := ref.node.Get(sig); !ok || math.Abs(got-want) > 1e-9*math.Max(1, want) {
			t.Errorf("reference node %s = %v (%v), want %v", sig, got, ok, want)
		}
	}
	if len(ref.pods) != 3 {
		t.Fatalf("reference pods = %v, want 3", ref.pods)
	}
	for name, r := range results {
		compareSample(t, name+" node", ref.node, r.node)
		if len(r.pods) != len(ref.pods) {
			t.Errorf("%s: %d pods, reference %d", name, len(r.pods), len(ref.pods))
		}
		for k, want := range ref.pods {
			compareSample(t, name+" pod "+k.Namespace+"/"+k.Name, want, r.pods[k])
		}
	}
}

func compareSample(t *testing.T, what string, want, got store.Sample) {
	t.Helper()
	for sig := signal.Signal(0); sig < signal.NumSignals; sig++ {
		w, wok := want.Get(sig)
		g, gok := got.Get(sig)
		if wok != gok || math.Abs(g-w) > 1e-9*math.Max(1, math.Abs(w)) {
			t.Errorf("%s: %s = %v (%v), reference %v (%v)", what, sig, g, gok, w, wok)
		}
	}
}
