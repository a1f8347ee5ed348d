//go:build linux && cgo

package nvml

import (
	"context"
	"errors"
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// assertFields checks that r has exactly the fields in want, with their
// values: a field missing from want must be absent, not zero.
func assertFields(t *testing.T, r gpu.Reading, want map[gpu.Field]float64) {
	t.Helper()
	for f := range gpu.NumFields {
		got, ok := r.Get(f)
		w, wantOK := want[f]
		switch {
		case ok != wantOK:
			t.Errorf("%s %s: present=%v, want present=%v (value %v)", r.Device.ID(), f, ok, wantOK, got)
		case ok && got != w:
			t.Errorf("%s %s = %v, want %v", r.Device.ID(), f, got, w)
		}
	}
}

func collect(t *testing.T, b *Backend) []gpu.Reading {
	t.Helper()
	rs, err := b.Collect(context.Background())
	if err != nil {
		t.Fatalf("Collect: %v", err)
	}
	return rs
}

// healthyFields is what healthyGPU(i) must read as, units converted.
func healthyFields(i int) map[gpu.Field]float64 {
	n := float64(i)
	return map[gpu.Field]float64{
		gpu.FieldGPUUtil:                   40 + n,
		gpu.FieldMemCopyUtil:               20 + n,
		gpu.FieldFBUsed:                    10240 + n,     // 10 GiB + i MiB + 1234 B, floored to MiB
		gpu.FieldFBFree:                    71168 - n - 1, // the 1234 B missing from a whole MiB
		gpu.FieldFBReserved:                512,
		gpu.FieldFBTotal:                   81920,
		gpu.FieldGPUTemp:                   50 + n,
		gpu.FieldMemoryTemp:                60 + n,
		gpu.FieldPowerUsage:                250.5 + n, // mW -> W
		gpu.FieldPowerLimit:                700,
		gpu.FieldEnergy:                    123456789 + n, // mJ, unchanged
		gpu.FieldSMClock:                   1980,
		gpu.FieldMemClock:                  2619,
		gpu.FieldEncUtil:                   3 + n,
		gpu.FieldDecUtil:                   7 + n,
		gpu.FieldPCIeReplay:                2 + n,
		gpu.FieldPCIeTxThroughput:          1200 + n,
		gpu.FieldPCIeRxThroughput:          3400 + n,
		gpu.FieldRemappedRowsCorrectable:   1 + n,
		gpu.FieldRemappedRowsUncorrectable: n,
		gpu.FieldRowRemapPending:           map[bool]float64{true: 1}[i == 1],
		gpu.FieldRowRemapFailure:           0,
		gpu.FieldPowerMgmtLimit:            650,
		gpu.FieldPowerViolation:            1e9 + n,
		gpu.FieldThermalViolation:          2e6,
		gpu.FieldSyncBoostViolation:        0,
		gpu.FieldBoardLimitViolation:       3,
		gpu.FieldLowUtilViolation:          7e10,
		gpu.FieldReliabilityViolation:      0,
		gpu.FieldECCSBEVolatile:            3 + n,
		gpu.FieldECCDBEVolatile:            0,
		gpu.FieldECCSBEAggregate:           40,
		gpu.FieldECCDBEAggregate:           1,
		gpu.FieldRetiredPagesSBE:           2,
		gpu.FieldRetiredPagesDBE:           1,
		gpu.FieldRetiredPending:            0,
		gpu.FieldNVLinkCRCFlitErrors:       5,
		gpu.FieldNVLinkCRCDataErrors:       6,
		gpu.FieldNVLinkReplayErrors:        7,
		gpu.FieldNVLinkRecoveryErrors:      8,
		gpu.FieldFabricHealthSummary:       1,
		gpu.FieldFabricHealthMask:          0,
	}
}

func TestCollectHealthyGPUs(t *testing.T) {
	f := newFixture(healthyGPU(0), healthyGPU(1))
	b := newBackend(t, f, Options{XIDEvents: true})

	if b.Kind() != gpu.KindNVML || b.DriverVersion() != "570.124.06" {
		t.Errorf("Kind, DriverVersion = %v, %q", b.Kind(), b.DriverVersion())
	}
	rs := collect(t, b)
	if len(rs) != 2 {
		t.Fatalf("got %d readings, want 2", len(rs))
	}
	wantBus := []string{"00000000:18:00.0", "00000000:19:00.0"}
	for i, r := range rs {
		if r.Err != nil {
			t.Fatalf("gpu %d: unexpected Err %v", i, r.Err)
		}
		want := gpu.Device{Index: i, Minor: i + 4, UUID: f.gpus[i].uuid, ModelName: "NVIDIA H100 80GB HBM3", PCIBusID: wantBus[i]}
		if r.Device != want {
			t.Errorf("gpu %d: Device = %+v, want %+v", i, r.Device, want)
		}
		fields := healthyFields(i)
		fields[gpu.FieldLastXID] = 0 // watched, none seen yet
		assertFields(t, r, fields)
		if r.XIDCounts == nil || len(r.XIDCounts) != 0 {
			t.Errorf("gpu %d: XIDCounts = %v, want empty and non-nil", i, r.XIDCounts)
		}
	}
}

// unsupportedTests each make GPU 0 lack some fields.
var unsupportedTests = []struct {
	name  string
	setup func(f *fixture)
	// drop are the fields that must be absent; the others keep their
	// healthy values unless changed in override.
	drop     []gpu.Field
	override map[gpu.Field]float64
}{{
	name:  "field values not supported: every field value absent",
	setup: func(f *fixture) { f.gpus[0].setRet("GetFieldValues", gonvml.ERROR_NOT_SUPPORTED) },
	drop: []gpu.Field{gpu.FieldMemoryTemp, gpu.FieldECCSBEVolatile, gpu.FieldECCDBEVolatile,
		gpu.FieldECCSBEAggregate, gpu.FieldECCDBEAggregate, gpu.FieldRetiredPagesSBE, gpu.FieldRetiredPagesDBE,
		gpu.FieldRetiredPending, gpu.FieldNVLinkCRCFlitErrors, gpu.FieldNVLinkCRCDataErrors, gpu.FieldNVLinkReplayErrors,
		gpu.FieldNVLinkRecoveryErrors},
}, {
	name:  "memory temperature not supported in the value",
	setup: func(f *fixture) { f.gpus[0].setRet("FI_DEV_MEMORY_TEMP", gonvml.ERROR_NOT_SUPPORTED) },
	drop:  []gpu.Field{gpu.FieldMemoryTemp},
}, {
	name:     "memory v2 not supported: v1 without reserved",
	setup:    func(f *fixture) { f.gpus[0].setRet("GetMemoryInfo_v2", gonvml.ERROR_NOT_SUPPORTED) },
	drop:     []gpu.Field{gpu.FieldFBReserved},
	override: map[gpu.Field]float64{gpu.FieldFBUsed: 10752, gpu.FieldFBFree: 71168},
}, {
	name:     "memory v2 symbol missing from the driver: v1",
	setup:    func(f *fixture) { f.memV2Sym = false },
	drop:     []gpu.Field{gpu.FieldFBReserved},
	override: map[gpu.Field]float64{gpu.FieldFBUsed: 10752, gpu.FieldFBFree: 71168},
}, {
	name:  "energy not supported",
	setup: func(f *fixture) { f.gpus[0].setRet("GetTotalEnergyConsumption", gonvml.ERROR_NOT_SUPPORTED) },
	drop:  []gpu.Field{gpu.FieldEnergy},
}, {
	name:  "power usage needs a permission we lack",
	setup: func(f *fixture) { f.gpus[0].setRet("GetPowerUsage", gonvml.ERROR_NO_PERMISSION) },
	drop:  []gpu.Field{gpu.FieldPowerUsage},
}, {
	name:  "memory temperature of an unknown value type",
	setup: func(f *fixture) { f.gpus[0].memTempType = gonvml.VALUE_TYPE_COUNT },
	drop:  []gpu.Field{gpu.FieldMemoryTemp},
}, {
	name:     "memory temperature as a double",
	setup:    func(f *fixture) { f.gpus[0].memTempType = gonvml.VALUE_TYPE_DOUBLE; f.gpus[0].memTemp = 61.5 },
	override: map[gpu.Field]float64{gpu.FieldMemoryTemp: 61.5},
}, {
	name: "all unsupported",
	setup: func(f *fixture) {
		for _, c := range failureCalls {
			f.gpus[0].setRet(c.key, gonvml.ERROR_NOT_SUPPORTED)
		}
		f.gpus[0].setRet("GetMemoryInfo", gonvml.ERROR_NOT_SUPPORTED)
	},
	drop: func() []gpu.Field {
		var all []gpu.Field
		for f := range healthyFields(0) {
			all = append(all, f)
		}
		return all
	}(),
}, {
	name: "NVLink counters not supported: absent",
	setup: func(f *fixture) {
		f.gpus[0].nvlink = true
		f.gpus[0].setRet("FI_DEV_NVLINK_THROUGHPUT", gonvml.ERROR_NOT_SUPPORTED)
	},
}, {
	name:     "licensed vGPU guest",
	setup:    func(f *fixture) { f.gpus[0].virtMode, f.gpus[0].licensed = gonvml.GPU_VIRTUALIZATION_MODE_VGPU, true },
	override: map[gpu.Field]float64{gpu.FieldVGPULicensed: 1},
}, {
	name:     "unlicensed vGPU guest: 0, not absent",
	setup:    func(f *fixture) { f.gpus[0].virtMode = gonvml.GPU_VIRTUALIZATION_MODE_VGPU },
	override: map[gpu.Field]float64{gpu.FieldVGPULicensed: 0},
}, {
	name: "passthrough: no licence to report",
	setup: func(f *fixture) {
		f.gpus[0].virtMode, f.gpus[0].licensed = gonvml.GPU_VIRTUALIZATION_MODE_PASSTHROUGH, true
	},
}, {
	name:  "no row remapper (pre-Ampere): the four remap fields absent together",
	setup: func(f *fixture) { f.gpus[0].setRet("GetRemappedRows", gonvml.ERROR_NOT_SUPPORTED) },
	drop: []gpu.Field{gpu.FieldRemappedRowsCorrectable, gpu.FieldRemappedRowsUncorrectable,
		gpu.FieldRowRemapPending, gpu.FieldRowRemapFailure},
}}

func TestCollectUnsupportedFieldsAreAbsent(t *testing.T) {
	for _, tt := range unsupportedTests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(healthyGPU(0))
			tt.setup(f)
			rs := collect(t, newBackend(t, f, Options{}))
			if len(rs) != 1 || rs[0].Err != nil {
				t.Fatalf("readings = %+v, want one healthy", rs)
			}

			want := healthyFields(0)
			for _, fld := range tt.drop {
				delete(want, fld)
			}
			for fld, v := range tt.override {
				want[fld] = v
			}
			assertFields(t, rs[0], want)
			if rs[0].XIDCounts != nil {
				t.Errorf("XIDCounts = %v without XID events, want nil", rs[0].XIDCounts)
			}
		})
	}
}

func TestCollectGPUFailsAndRecovers(t *testing.T) {
	f := newFixture(healthyGPU(0), healthyGPU(1), healthyGPU(2))
	b := newBackend(t, f, Options{})

	steps := []struct {
		name    string
		ret     gonvml.Return // GetPowerUsage of GPU 1
		wantErr bool
	}{
		{"healthy", gonvml.SUCCESS, false},
		{"lost", gonvml.ERROR_GPU_IS_LOST, true},
		{"back", gonvml.SUCCESS, false},
	}
	for _, step := range steps {
		f.gpus[1].setRet("GetPowerUsage", step.ret)
		rs := collect(t, b)
		if len(rs) != 3 {
			t.Fatalf("%s: got %d readings, want 3", step.name, len(rs))
		}
		for i, r := range rs {
			if r.Device.Index != i || r.Device.UUID != f.gpus[i].uuid {
				t.Errorf("%s: reading %d is %+v", step.name, i, r.Device)
			}
			if i == 1 && step.wantErr {
				assertLost(t, r.Err)
				continue
			}
			if r.Err != nil {
				t.Errorf("%s: gpu %d: unexpected Err %v", step.name, i, r.Err)
			}
			assertFields(t, r, healthyFields(i))
		}
	}
}

// assertLost checks that err is GPU 1's lost power reading and that callers
// can get at the NVML return code.
func assertLost(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("Err = nil, want GPU_IS_LOST")
	}
	want := "gpu 1 (GPU-00000001-aaaa-bbbb-cccc-dddddddddddd): get power usage: ERROR_GPU_IS_LOST"
	if err.Error() != want {
		t.Errorf("Err = %q, want %q", err, want)
	}
	var nerr *Error
	if !errors.As(err, &nerr) || nerr.Return != gonvml.ERROR_GPU_IS_LOST || nerr.Op != "get power usage" {
		t.Errorf("errors.As(*Error) = %+v", nerr)
	}
	var ret gonvml.Return
	if !errors.As(err, &ret) || ret != gonvml.ERROR_GPU_IS_LOST {
		t.Errorf("errors.As(Return) = %v", ret)
	}
}

func TestCollectRecoversPanics(t *testing.T) {
	f := newFixture(healthyGPU(0), healthyGPU(1))
	f.devices[0].GetTemperatureFunc = func(gonvml.TemperatureSensors) (uint32, gonvml.Return) {
		panic("driver exploded")
	}
	rs := collect(t, newBackend(t, f, Options{}))
	if len(rs) != 2 {
		t.Fatalf("got %d readings, want 2", len(rs))
	}
	if rs[0].Err == nil || !strings.Contains(rs[0].Err.Error(), "panic") ||
		!strings.Contains(rs[0].Err.Error(), "driver exploded") || rs[0].Device.UUID != f.gpus[0].uuid {
		t.Errorf("gpu 0: Err = %v, Device = %+v; want the panic", rs[0].Err, rs[0].Device)
	}
	if rs[1].Err != nil {
		t.Fatalf("gpu 1: Err = %v", rs[1].Err)
	}
	assertFields(t, rs[1], healthyFields(1))
}

func TestGPUUnidentifiedAtNewIsRetried(t *testing.T) {
	f := newFixture(healthyGPU(0), healthyGPU(1))
	f.gpus[1].setRet("DeviceGetHandleByIndex", gonvml.ERROR_GPU_IS_LOST)
	b := newBackend(t, f, Options{})

	rs := collect(t, b)
	if len(rs) != 2 || rs[0].Err != nil || rs[1].Err == nil || rs[1].Device.Index != 1 {
		t.Fatalf("first Collect = %+v, want gpu 0 healthy and gpu 1 failed", rs)
	}
	f.gpus[1].setRet("DeviceGetHandleByIndex", gonvml.SUCCESS)
	rs = collect(t, b)
	if len(rs) != 2 || rs[1].Err != nil || rs[1].Device.UUID != f.gpus[1].uuid {
		t.Fatalf("second Collect = %+v, want gpu 1 identified and healthy", rs)
	}
	assertFields(t, rs[1], healthyFields(1))
}

func TestCollectHonoursContext(t *testing.T) {
	f := newFixture(healthyGPU(0), healthyGPU(1))
	b := newBackend(t, f, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	// Cancel while GPU 0 is read: GPU 1 must not be.
	f.devices[0].GetClockInfoFunc = func(gonvml.ClockType) (uint32, gonvml.Return) {
		cancel()
		return 1, gonvml.SUCCESS
	}
	rs, err := b.Collect(ctx)
	if !errors.Is(err, context.Canceled) || rs != nil {
		t.Fatalf("Collect = %v, %v; want nil, context.Canceled", rs, err)
	}
	if n := len(f.devices[1].GetUtilizationRatesCalls()); n != 0 {
		t.Errorf("gpu 1 read %d times after cancellation", n)
	}
}

func TestClose(t *testing.T) {
	f := newFixture(healthyGPU(0))
	b := newBackend(t, f, Options{XIDEvents: true})
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if got := f.shutdowns.Load(); got != 1 {
		t.Errorf("Shutdown called %d times, want 1", got)
	}
	if got := f.frees.Load(); got != 1 {
		t.Errorf("event set freed %d times, want 1", got)
	}
	if _, err := b.Collect(context.Background()); err == nil {
		t.Error("Collect after Close succeeded")
	}
}
