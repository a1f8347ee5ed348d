//go:build linux && cgo

package nvml

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// failureCalls are the NVML calls of a whole GPU, by the fixture's key, and
// the fields each fills. Failing any one of them must fail those fields
// alone.
var failureCalls = []struct {
	key    string
	fields []gpu.Field
	// setup changes both GPUs before the test; want, the fields it adds.
	setup func(g *fakeGPU)
	want  map[gpu.Field]float64
}{
	{key: "GetUtilizationRates", fields: []gpu.Field{gpu.FieldGPUUtil, gpu.FieldMemCopyUtil}},
	{key: "GetMemoryInfo_v2", fields: []gpu.Field{gpu.FieldFBUsed, gpu.FieldFBFree, gpu.FieldFBReserved, gpu.FieldFBTotal}},
	{key: "GetTemperature", fields: []gpu.Field{gpu.FieldGPUTemp}},
	{key: "GetPowerUsage", fields: []gpu.Field{gpu.FieldPowerUsage}},
	{key: "GetEnforcedPowerLimit", fields: []gpu.Field{gpu.FieldPowerLimit}},
	{key: "GetPowerManagementLimit", fields: []gpu.Field{gpu.FieldPowerMgmtLimit}},
	{key: "GetTotalEnergyConsumption", fields: []gpu.Field{gpu.FieldEnergy}},
	{key: "GetClockInfo/SM", fields: []gpu.Field{gpu.FieldSMClock}},
	{key: "GetClockInfo/MEM", fields: []gpu.Field{gpu.FieldMemClock}},
	{key: "GetEncoderUtilization", fields: []gpu.Field{gpu.FieldEncUtil}},
	{key: "GetDecoderUtilization", fields: []gpu.Field{gpu.FieldDecUtil}},
	{key: "GetPcieReplayCounter", fields: []gpu.Field{gpu.FieldPCIeReplay}},
	{key: "GetPcieThroughput/TX", fields: []gpu.Field{gpu.FieldPCIeTxThroughput}},
	{key: "GetPcieThroughput/RX", fields: []gpu.Field{gpu.FieldPCIeRxThroughput}},
	{key: "GetRemappedRows", fields: []gpu.Field{gpu.FieldRemappedRowsCorrectable, gpu.FieldRemappedRowsUncorrectable,
		gpu.FieldRowRemapPending, gpu.FieldRowRemapFailure}},
	{key: "GetVirtualizationMode", fields: []gpu.Field{gpu.FieldVGPULicensed},
		setup: licensedVGPU, want: map[gpu.Field]float64{gpu.FieldVGPULicensed: 1}},
	{key: "GetGridLicensableFeatures", fields: []gpu.Field{gpu.FieldVGPULicensed},
		setup: licensedVGPU, want: map[gpu.Field]float64{gpu.FieldVGPULicensed: 1}},
	{key: fmt.Sprintf("GetViolationStatus/%d", gonvml.PERF_POLICY_POWER), fields: []gpu.Field{gpu.FieldPowerViolation}},
	{key: fmt.Sprintf("GetViolationStatus/%d", gonvml.PERF_POLICY_THERMAL), fields: []gpu.Field{gpu.FieldThermalViolation}},
	{key: fmt.Sprintf("GetViolationStatus/%d", gonvml.PERF_POLICY_SYNC_BOOST), fields: []gpu.Field{gpu.FieldSyncBoostViolation}},
	{key: fmt.Sprintf("GetViolationStatus/%d", gonvml.PERF_POLICY_BOARD_LIMIT), fields: []gpu.Field{gpu.FieldBoardLimitViolation}},
	{key: fmt.Sprintf("GetViolationStatus/%d", gonvml.PERF_POLICY_LOW_UTILIZATION), fields: []gpu.Field{gpu.FieldLowUtilViolation}},
	{key: fmt.Sprintf("GetViolationStatus/%d", gonvml.PERF_POLICY_RELIABILITY), fields: []gpu.Field{gpu.FieldReliabilityViolation}},
	{key: "GetGpuFabricInfoV", fields: []gpu.Field{gpu.FieldFabricHealthSummary, gpu.FieldFabricHealthMask}},
	// The field-value batch: the call as a whole, and each value alone.
	{key: "GetFieldValues", fields: []gpu.Field{gpu.FieldMemoryTemp, gpu.FieldECCSBEVolatile, gpu.FieldECCDBEVolatile,
		gpu.FieldECCSBEAggregate, gpu.FieldECCDBEAggregate, gpu.FieldRetiredPagesSBE, gpu.FieldRetiredPagesDBE,
		gpu.FieldRetiredPending, gpu.FieldNVLinkCRCFlitErrors, gpu.FieldNVLinkCRCDataErrors, gpu.FieldNVLinkReplayErrors,
		gpu.FieldNVLinkRecoveryErrors, gpu.FieldNVLinkBandwidth}, setup: withNVLink, want: nvlinkMiBps},
	{key: "FI_DEV_MEMORY_TEMP", fields: []gpu.Field{gpu.FieldMemoryTemp}},
	{key: fieldValueCall(gonvml.FI_DEV_ECC_SBE_VOL_TOTAL), fields: []gpu.Field{gpu.FieldECCSBEVolatile}},
	{key: fieldValueCall(gonvml.FI_DEV_ECC_DBE_VOL_TOTAL), fields: []gpu.Field{gpu.FieldECCDBEVolatile}},
	{key: fieldValueCall(gonvml.FI_DEV_ECC_SBE_AGG_TOTAL), fields: []gpu.Field{gpu.FieldECCSBEAggregate}},
	{key: fieldValueCall(gonvml.FI_DEV_ECC_DBE_AGG_TOTAL), fields: []gpu.Field{gpu.FieldECCDBEAggregate}},
	{key: fieldValueCall(gonvml.FI_DEV_RETIRED_SBE), fields: []gpu.Field{gpu.FieldRetiredPagesSBE}},
	{key: fieldValueCall(gonvml.FI_DEV_RETIRED_DBE), fields: []gpu.Field{gpu.FieldRetiredPagesDBE}},
	{key: fieldValueCall(gonvml.FI_DEV_RETIRED_PENDING), fields: []gpu.Field{gpu.FieldRetiredPending}},
	{key: fieldValueCall(gonvml.FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL), fields: []gpu.Field{gpu.FieldNVLinkCRCFlitErrors}},
	{key: fieldValueCall(gonvml.FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL), fields: []gpu.Field{gpu.FieldNVLinkCRCDataErrors}},
	{key: fieldValueCall(gonvml.FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL), fields: []gpu.Field{gpu.FieldNVLinkReplayErrors}},
	{key: fieldValueCall(gonvml.FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL), fields: []gpu.Field{gpu.FieldNVLinkRecoveryErrors}},
	{key: "FI_DEV_NVLINK_THROUGHPUT", fields: []gpu.Field{gpu.FieldNVLinkBandwidth}, setup: withNVLink, want: nvlinkMiBps},
}

func licensedVGPU(g *fakeGPU) { g.virtMode, g.licensed = gonvml.GPU_VIRTUALIZATION_MODE_VGPU, true }

// withNVLink gives a GPU NVLink data counters; the test moves them 1 MiB
// between two collections a second apart: nvlinkMiBps.
func withNVLink(g *fakeGPU) { g.nvlink = true }

var nvlinkMiBps = map[gpu.Field]float64{gpu.FieldNVLinkBandwidth: 1 << 20}

// TestEachFieldFailsAlone makes every call of GPU 0, in turn, return every
// error code nvml.h documents. A code that says the GPU is gone fails the
// GPU (reported unhealthy, never hidden); any other fails the call's
// fields alone: they are absent and listed with the code, every other
// field of the GPU is read, and GPU 1 is untouched. A code that says the
// field is not there (not supported, no permission, no such function in
// the driver) is listed once per device, others at every collection.
func TestEachFieldFailsAlone(t *testing.T) {
	for _, c := range failureCalls {
		for _, ret := range Returns {
			if c.key == "GetMemoryInfo_v2" && (ret == gonvml.ERROR_NOT_SUPPORTED || ret == gonvml.ERROR_FUNCTION_NOT_FOUND) {
				continue // v1 answers instead: TestCollectUnsupportedFieldsAreAbsent
			}
			t.Run(c.key+"/"+codeName(ret), func(t *testing.T) {
				f := newFixture(healthyGPU(0), healthyGPU(1))
				want := []map[gpu.Field]float64{healthyFields(0), healthyFields(1)}
				for i, g := range f.gpus {
					if c.setup != nil {
						c.setup(g)
					}
					for fld, v := range c.want {
						want[i][fld] = v
					}
				}
				b := newBackend(t, f, Options{})
				collect(t, b) // primes the NVLink counters
				for _, g := range f.gpus {
					g.mu.Lock()
					g.nvlinkTxKiB += 1024
					g.mu.Unlock()
				}
				f.gpus[0].setRet(c.key, ret)
				rs := collect(t, b)
				if len(rs) != 2 {
					t.Fatalf("%d readings, want 2", len(rs))
				}
				assertFields(t, rs[1], want[1])
				if rs[1].Err != nil || len(rs[1].FieldErrors) != 0 {
					t.Errorf("GPU 1: Err %v, field errors %v", rs[1].Err, rs[1].FieldErrors)
				}
				if deviceGone(ret) {
					var got gonvml.Return
					if !errors.As(rs[0].Err, &got) || got != ret || rs[0].Device.UUID != f.gpus[0].uuid {
						t.Errorf("GPU 0: Err %v, device %+v; want the GPU reported unhealthy with %v", rs[0].Err, rs[0].Device, ret)
					}
					return
				}
				if rs[0].Err != nil {
					t.Fatalf("GPU 0 failed as a whole: %v", rs[0].Err)
				}
				for _, fld := range c.fields {
					delete(want[0], fld)
				}
				assertFields(t, rs[0], want[0])
				assertFieldErrors(t, rs[0].FieldErrors, c.fields, codeName(ret))
				// Again: a field that is not there is not reported twice.
				rs = collect(t, b)
				if quietReturn(ret) {
					assertFieldErrors(t, rs[0].FieldErrors, nil, "")
				} else {
					assertFieldErrors(t, rs[0].FieldErrors, c.fields, codeName(ret))
				}
			})
		}
	}
}

// assertFieldErrors checks that errs lists exactly fields, each with code.
func assertFieldErrors(t *testing.T, errs []gpu.FieldError, fields []gpu.Field, code string) {
	t.Helper()
	var got []gpu.Field
	for _, fe := range errs {
		got = append(got, fe.Field)
		if fe.Code != code {
			t.Errorf("field error %s code %q, want %q", fe.Field, fe.Code, code)
		}
	}
	want := slices.Clone(fields)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("field errors on %v, want on %v", got, want)
	}
}

func TestCodeNames(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Returns {
		n := codeName(r)
		// The table's names are nvml.h's, as go-nvml spells them without
		// a driver loaded.
		if n != r.Error() || seen[n] {
			t.Errorf("codeName(%d) = %q, go-nvml says %q", r, n, r.Error())
		}
		seen[n] = true
	}
	if got := codeName(gonvml.Return(12345)); got != "ERROR_OTHER" {
		t.Errorf("an undocumented code is named %q", got)
	}
	if len(Returns) != 31 {
		t.Errorf("%d documented return codes, want the 31 of go-nvml v0.13", len(Returns))
	}
}

// TestMIGFieldFailsAlone: a MIG instance whose memory cannot be read is
// still reported, healthy, without its memory fields; its siblings and
// parent are read.
func TestMIGFieldFailsAlone(t *testing.T) {
	g := migGPU()
	g.migs[0].memRet = gonvml.ERROR_UNKNOWN // MIG-cccc
	f := newFixture(g)
	rs := collect(t, newBackend(t, f, Options{}))
	if len(rs) != 4 {
		t.Fatalf("%d readings, want the GPU and its 3 instances", len(rs))
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Errorf("%s: Err %v", r.Device.ID(), r.Err)
		}
		_, hasMem := r.Get(gpu.FieldFBUsed)
		if r.Device.ID() == "MIG-cccc" {
			if hasMem {
				t.Error("MIG-cccc serves memory it could not read")
			}
			// Utilization is not supported on MIG handles: listed once.
			failed := slices.DeleteFunc(slices.Clone(r.FieldErrors), func(fe gpu.FieldError) bool { return fe.Code == "ERROR_NOT_SUPPORTED" })
			assertFieldErrors(t, failed, []gpu.Field{gpu.FieldFBUsed, gpu.FieldFBFree, gpu.FieldFBReserved, gpu.FieldFBTotal}, "ERROR_UNKNOWN")
		} else if !hasMem {
			t.Errorf("%s: no memory", r.Device.ID())
		}
	}
}

// TestNVLinkThroughput: the NVLink data counters (KiB, TX plus RX, every
// link) become bytes per second between two collections; the first only
// primes them, and a counter going back (a driver reload) does too.
func TestNVLinkThroughput(t *testing.T) {
	g := healthyGPU(0)
	g.nvlink, g.nvlinkTxKiB, g.nvlinkRxKiB = true, 1000, 24
	f := newFixture(g)
	b := newBackend(t, f, Options{})
	if _, ok := collect(t, b)[0].Get(gpu.FieldNVLinkBandwidth); ok {
		t.Error("a throughput from the first reading")
	}
	steps := []struct {
		tx, rx uint64
		want   float64
		ok     bool
	}{
		{2000, 1072, 2048 * 1024, true}, // 2 MiB in the second between collections
		{2000, 1072, 0, true},
		{10, 10, 0, false}, // counters reset
		{1034, 10, 1024 * 1024, true},
	}
	for i, st := range steps {
		g.mu.Lock()
		g.nvlinkTxKiB, g.nvlinkRxKiB = st.tx, st.rx
		g.mu.Unlock()
		got, ok := collect(t, b)[0].Get(gpu.FieldNVLinkBandwidth)
		if ok != st.ok || got != st.want {
			t.Errorf("step %d: %v (%v), want %v (%v)", i, got, ok, st.want, st.ok)
		}
	}
}
