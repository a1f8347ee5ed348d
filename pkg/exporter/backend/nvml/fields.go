//go:build linux && cgo

package nvml

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// A call is one NVML query and the fields it fills. Each call fails alone:
// its fields are then absent and listed in the reading's FieldErrors, and
// the device's other calls are still made. Only a return that says the
// device itself is gone (deviceGone) fails the whole device.
type call struct {
	// op names the call in words, for errors and the tests' mock.
	op     string
	fields []gpu.Field
	// read makes the call and, on success, sets the fields it read. It
	// returns NVML's verdict; a field it leaves unset on success (a vGPU
	// licence on bare metal) is simply absent.
	read func(b *Backend, g *gpuDevice, d gonvml.Device, r *gpu.Reading) gonvml.Return
}

// gpuCalls are made for every whole GPU.
var gpuCalls = []call{
	{"get utilization rates", []gpu.Field{gpu.FieldGPUUtil, gpu.FieldMemCopyUtil}, readUtilization},
	{"get memory info", []gpu.Field{gpu.FieldFBUsed, gpu.FieldFBFree, gpu.FieldFBReserved, gpu.FieldFBTotal}, readMemory},
	{"get GPU temperature", []gpu.Field{gpu.FieldGPUTemp}, readTemperature},
	{"get power usage", []gpu.Field{gpu.FieldPowerUsage}, readPowerUsage},
	{"get enforced power limit", []gpu.Field{gpu.FieldPowerLimit}, readEnforcedLimit},
	{"get power management limit", []gpu.Field{gpu.FieldPowerMgmtLimit}, readManagementLimit},
	{"get total energy consumption", []gpu.Field{gpu.FieldEnergy}, readEnergy},
	{"get SM clock", []gpu.Field{gpu.FieldSMClock}, readClock(gonvml.CLOCK_SM, gpu.FieldSMClock)},
	{"get memory clock", []gpu.Field{gpu.FieldMemClock}, readClock(gonvml.CLOCK_MEM, gpu.FieldMemClock)},
	{"get encoder utilization", []gpu.Field{gpu.FieldEncUtil}, readEncoder},
	{"get decoder utilization", []gpu.Field{gpu.FieldDecUtil}, readDecoder},
	{"get PCIe replay counter", []gpu.Field{gpu.FieldPCIeReplay}, readPCIeReplay},
	{"get PCIe TX throughput", []gpu.Field{gpu.FieldPCIeTxThroughput}, readPCIe(gonvml.PCIE_UTIL_TX_BYTES, gpu.FieldPCIeTxThroughput)},
	{"get PCIe RX throughput", []gpu.Field{gpu.FieldPCIeRxThroughput}, readPCIe(gonvml.PCIE_UTIL_RX_BYTES, gpu.FieldPCIeRxThroughput)},
	{"get remapped rows", []gpu.Field{gpu.FieldRemappedRowsCorrectable, gpu.FieldRemappedRowsUncorrectable,
		gpu.FieldRowRemapPending, gpu.FieldRowRemapFailure}, readRemappedRows},
	{"get vGPU licence", []gpu.Field{gpu.FieldVGPULicensed}, readVGPULicense},
	{"get power violation", []gpu.Field{gpu.FieldPowerViolation}, readViolation(gonvml.PERF_POLICY_POWER, gpu.FieldPowerViolation)},
	{"get thermal violation", []gpu.Field{gpu.FieldThermalViolation}, readViolation(gonvml.PERF_POLICY_THERMAL, gpu.FieldThermalViolation)},
	{"get sync boost violation", []gpu.Field{gpu.FieldSyncBoostViolation}, readViolation(gonvml.PERF_POLICY_SYNC_BOOST, gpu.FieldSyncBoostViolation)},
	{"get board limit violation", []gpu.Field{gpu.FieldBoardLimitViolation}, readViolation(gonvml.PERF_POLICY_BOARD_LIMIT, gpu.FieldBoardLimitViolation)},
	{"get low utilization violation", []gpu.Field{gpu.FieldLowUtilViolation}, readViolation(gonvml.PERF_POLICY_LOW_UTILIZATION, gpu.FieldLowUtilViolation)},
	{"get reliability violation", []gpu.Field{gpu.FieldReliabilityViolation}, readViolation(gonvml.PERF_POLICY_RELIABILITY, gpu.FieldReliabilityViolation)},
	{"get fabric health", []gpu.Field{gpu.FieldFabricHealthSummary, gpu.FieldFabricHealthMask}, readFabricHealth},
}

// migCalls are made for MIG device handles. Temperature, power and clocks
// belong to the whole GPU and are reported there, as dcgm-exporter does.
var migCalls = gpuCalls[:2]

// fieldValues are the fields read in one nvmlDeviceGetFieldValues call,
// each with its own return code: the HBM temperature (the only NVML route
// to it), the ECC and retired-page counts, the NVLink error counters and
// the NVLink data counters, all summed over every link (scope UINT_MAX).
var fieldValues = []struct {
	id    uint32
	field gpu.Field
}{
	{gonvml.FI_DEV_MEMORY_TEMP, gpu.FieldMemoryTemp},
	{gonvml.FI_DEV_ECC_SBE_VOL_TOTAL, gpu.FieldECCSBEVolatile},
	{gonvml.FI_DEV_ECC_DBE_VOL_TOTAL, gpu.FieldECCDBEVolatile},
	{gonvml.FI_DEV_ECC_SBE_AGG_TOTAL, gpu.FieldECCSBEAggregate},
	{gonvml.FI_DEV_ECC_DBE_AGG_TOTAL, gpu.FieldECCDBEAggregate},
	{gonvml.FI_DEV_RETIRED_SBE, gpu.FieldRetiredPagesSBE},
	{gonvml.FI_DEV_RETIRED_DBE, gpu.FieldRetiredPagesDBE},
	{gonvml.FI_DEV_RETIRED_PENDING, gpu.FieldRetiredPending},
	{gonvml.FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, gpu.FieldNVLinkCRCFlitErrors},
	{gonvml.FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, gpu.FieldNVLinkCRCDataErrors},
	{gonvml.FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, gpu.FieldNVLinkReplayErrors},
	{gonvml.FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL, gpu.FieldNVLinkRecoveryErrors},
	// The data counters, in KiB since driver load, make one field: the
	// throughput between two collections (readNVLinkThroughput).
	{gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, gpu.FieldNVLinkBandwidth},
	{gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, gpu.FieldNVLinkBandwidth},
}

// allLinks is NVML's scope for a field summed over every NVLink (UINT_MAX).
const allLinks = ^uint32(0)

// deviceGoneError is a return that says the device itself, not one of its
// fields, is gone: its reading fails as a whole and no further call is
// made on it this collection (each could take NVML's timeout).
type deviceGoneError struct{ err error }

func (e deviceGoneError) Error() string { return e.err.Error() }
func (e deviceGoneError) Unwrap() error { return e.err }

// readFields makes calls and the field-value batch on d into r. Each
// failed call's fields are listed in r.FieldErrors; an error is returned
// only when the device is gone.
func (b *Backend) readFields(g *gpuDevice, d gonvml.Device, r *gpu.Reading, calls []call, withValues bool) error {
	for _, c := range calls {
		ret := c.read(b, g, d, r)
		if ret == gonvml.SUCCESS {
			continue
		}
		if deviceGone(ret) {
			return deviceGoneError{&Error{Op: c.op, Return: ret}}
		}
		for _, f := range c.fields {
			b.fieldFailed(r, f, ret)
		}
	}
	if withValues {
		return b.readFieldValues(g, d, r)
	}
	return nil
}

// fieldFailed lists a field that could not be read. A field the device
// does not support, that needs a permission the exporter lacks or that the
// driver does not have (quietReturn) is a fact about the device rather
// than a failure: it is listed once per device, not at every collection.
func (b *Backend) fieldFailed(r *gpu.Reading, f gpu.Field, ret gonvml.Return) {
	if quietReturn(ret) {
		id := r.Device.ID()
		if b.quiet[id]&(1<<uint64(f)) != 0 {
			return
		}
		if b.quiet == nil {
			b.quiet = map[string]uint64{}
		}
		b.quiet[id] |= 1 << uint64(f)
	}
	r.FieldErrors = append(r.FieldErrors, gpu.FieldError{Field: f, Code: codeName(ret)})
}

// readFieldValues reads the fieldValues batch: each value fails alone.
func (b *Backend) readFieldValues(g *gpuDevice, d gonvml.Device, r *gpu.Reading) error {
	values := make([]gonvml.FieldValue, len(fieldValues))
	for i, fv := range fieldValues {
		values[i] = gonvml.FieldValue{FieldId: fv.id, ScopeId: allLinks}
	}
	failAll := func(ret gonvml.Return) {
		last := gpu.NumFields
		for _, fv := range fieldValues {
			if fv.field != last {
				b.fieldFailed(r, fv.field, ret)
				last = fv.field
			}
		}
	}
	if ret := d.GetFieldValues(values); ret != gonvml.SUCCESS {
		if deviceGone(ret) {
			return deviceGoneError{&Error{Op: "get field values", Return: ret}}
		}
		failAll(ret)
		return nil
	}
	var nvlinkKiB float64
	nvlinkOK := true
	for i, fv := range fieldValues {
		v := values[i]
		ret := gonvml.Return(v.NvmlReturn)
		n, ok := decodeFieldValue(v)
		switch {
		case ret == gonvml.SUCCESS && !ok:
			ret = gonvml.ERROR_UNKNOWN // a value type NVML does not document
		case ret == gonvml.SUCCESS && fv.field == gpu.FieldNVLinkBandwidth:
			nvlinkKiB += n
			continue
		case ret == gonvml.SUCCESS:
			r.Set(fv.field, n)
			continue
		}
		if deviceGone(ret) {
			return deviceGoneError{&Error{Op: fmt.Sprintf("get field value %d", fv.id), Return: ret}}
		}
		if fv.field == gpu.FieldNVLinkBandwidth {
			if nvlinkOK {
				b.fieldFailed(r, fv.field, ret)
			}
			nvlinkOK = false
			continue
		}
		b.fieldFailed(r, fv.field, ret)
	}
	if nvlinkOK {
		b.setNVLinkThroughput(g, r, nvlinkKiB)
	} else {
		g.nvlinkAt = time.Time{}
	}
	return nil
}

// setNVLinkThroughput turns the NVLink data counters into bytes per second
// since the previous collection; the first collection only primes them.
func (b *Backend) setNVLinkThroughput(g *gpuDevice, r *gpu.Reading, kib float64) {
	now := b.now()
	if dt := now.Sub(g.nvlinkAt).Seconds(); !g.nvlinkAt.IsZero() && dt > 0 && kib >= g.nvlinkKiB {
		r.Set(gpu.FieldNVLinkBandwidth, (kib-g.nvlinkKiB)*1024/dt)
	}
	g.nvlinkKiB, g.nvlinkAt = kib, now
}

// decodeFieldValue reads the nvmlValue_t union in Value according to
// ValueType. The union is in host byte order; false for an unknown type.
func decodeFieldValue(v gonvml.FieldValue) (float64, bool) {
	raw := v.Value[:]
	switch gonvml.ValueType(v.ValueType) {
	case gonvml.VALUE_TYPE_DOUBLE:
		return math.Float64frombits(binary.NativeEndian.Uint64(raw)), true
	case gonvml.VALUE_TYPE_UNSIGNED_INT:
		return float64(binary.NativeEndian.Uint32(raw)), true
	case gonvml.VALUE_TYPE_UNSIGNED_LONG, gonvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		// unsigned long is 64 bits on the Linux targets NVML supports.
		return float64(binary.NativeEndian.Uint64(raw)), true
	case gonvml.VALUE_TYPE_SIGNED_LONG_LONG:
		return float64(int64(binary.NativeEndian.Uint64(raw))), true
	case gonvml.VALUE_TYPE_SIGNED_INT:
		return float64(int32(binary.NativeEndian.Uint32(raw))), true
	case gonvml.VALUE_TYPE_UNSIGNED_SHORT:
		return float64(binary.NativeEndian.Uint16(raw)), true
	default:
		return 0, false
	}
}

const mib = 1 << 20

func readUtilization(_ *Backend, _ *gpuDevice, d gonvml.Device, r *gpu.Reading) gonvml.Return {
	u, ret := d.GetUtilizationRates()
	if ret == gonvml.SUCCESS {
		r.Set(gpu.FieldGPUUtil, float64(u.Gpu))
		r.Set(gpu.FieldMemCopyUtil, float64(u.Memory))
	}
	return ret
}

// readMemory prefers the v2 call, which reports reserved memory separately;
// older drivers and some handles only answer v1, without reserved memory.
// Values are whole MiB, as DCGM reports them.
func readMemory(b *Backend, _ *gpuDevice, d gonvml.Device, r *gpu.Reading) gonvml.Return {
	if b.memV2 {
		m, ret := d.GetMemoryInfo_v2()
		switch ret {
		case gonvml.SUCCESS:
			r.Set(gpu.FieldFBUsed, float64(m.Used/mib))
			r.Set(gpu.FieldFBFree, float64(m.Free/mib))
			r.Set(gpu.FieldFBReserved, float64(m.Reserved/mib))
			r.Set(gpu.FieldFBTotal, float64(m.Total/mib))
			return ret
		case gonvml.ERROR_NOT_SUPPORTED, gonvml.ERROR_FUNCTION_NOT_FOUND:
			// Fall back to v1 below.
		default:
			return ret
		}
	}
	m, ret := d.GetMemoryInfo()
	if ret == gonvml.SUCCESS {
		r.Set(gpu.FieldFBUsed, float64(m.Used/mib))
		r.Set(gpu.FieldFBFree, float64(m.Free/mib))
		r.Set(gpu.FieldFBTotal, float64(m.Total/mib))
	}
	return ret
}

func readTemperature(_ *Backend, _ *gpuDevice, d gonvml.Device, r *gpu.Reading) gonvml.Return {
	t, ret := d.GetTemperature(gonvml.TEMPERATURE_GPU)
	if ret == gonvml.SUCCESS {
		r.Set(gpu.FieldGPUTemp, float64(t))
	}
	return ret
}

// milliwatts reads a power call in mW into a field in W.
func milliwatts(f gpu.Field, get func(gonvml.Device) (uint32, gonvml.Return)) func(*Backend, *gpuDevice, gonvml.Device, *gpu.Reading) gonvml.Return {
	return func(_ *Backend, _ *gpuDevice, d gonvml.Device, r *gpu.Reading) gonvml.Return {
		mw, ret := get(d)
		if ret == gonvml.SUCCESS {
			r.Set(f, float64(mw)/1000)
		}
		return ret
	}
}

var (
	readPowerUsage      = milliwatts(gpu.FieldPowerUsage, gonvml.Device.GetPowerUsage)
	readEnforcedLimit   = milliwatts(gpu.FieldPowerLimit, gonvml.Device.GetEnforcedPowerLimit)
	readManagementLimit = milliwatts(gpu.FieldPowerMgmtLimit, gonvml.Device.GetPowerManagementLimit)
)

func readEnergy(_ *Backend, _ *gpuDevice, d gonvml.Device, r *gpu.Reading) gonvml.Return {
	mj, ret := d.GetTotalEnergyConsumption()
	if ret == gonvml.SUCCESS {
		r.Set(gpu.FieldEnergy, float64(mj))
	}
	return ret
}

func readClock(clock gonvml.ClockType, f gpu.Field) func(*Backend, *gpuDevice, gonvml.Device, *gpu.Reading) gonvml.Return {
	return func(_ *Backend, _ *gpuDevice, d gonvml.Device, r *gpu.Reading) gonvml.Return {
		mhz, ret := d.GetClockInfo(clock)
		if ret == gonvml.SUCCESS {
			r.Set(f, float64(mhz))
		}
		return ret
	}
}

func readEncoder(_ *Backend, _ *gpuDevice, d gonvml.Device, r *gpu.Reading) gonvml.Return {
	enc, _, ret := d.GetEncoderUtilization()
	if ret == gonvml.SUCCESS {
		r.Set(gpu.FieldEncUtil, float64(enc))
	}
	return ret
}

func readDecoder(_ *Backend, _ *gpuDevice, d gonvml.Device, r *gpu.Reading) gonvml.Return {
	dec, _, ret := d.GetDecoderUtilization()
	if ret == gonvml.SUCCESS {
		r.Set(gpu.FieldDecUtil, float64(dec))
	}
	return ret
}

func readPCIeReplay(_ *Backend, _ *gpuDevice, d gonvml.Device, r *gpu.Reading) gonvml.Return {
	n, ret := d.GetPcieReplayCounter()
	if ret == gonvml.SUCCESS {
		r.Set(gpu.FieldPCIeReplay, float64(n))
	}
	return ret
}

// readPCIe reads the throughput NVML samples over 20 ms, in KB/s, as
// dcgm-exporter's PCIE_TX/RX_THROUGHPUT.
func readPCIe(counter gonvml.PcieUtilCounter, f gpu.Field) func(*Backend, *gpuDevice, gonvml.Device, *gpu.Reading) gonvml.Return {
	return func(_ *Backend, _ *gpuDevice, d gonvml.Device, r *gpu.Reading) gonvml.Return {
		kbps, ret := d.GetPcieThroughput(counter)
		if ret == gonvml.SUCCESS {
			r.Set(f, float64(kbps))
		}
		return ret
	}
}

// readRemappedRows reads the row remapper (Ampere and later HBM GPUs).
func readRemappedRows(_ *Backend, _ *gpuDevice, d gonvml.Device, r *gpu.Reading) gonvml.Return {
	corr, unc, pending, failed, ret := d.GetRemappedRows()
	if ret == gonvml.SUCCESS {
		r.Set(gpu.FieldRemappedRowsCorrectable, float64(corr))
		r.Set(gpu.FieldRemappedRowsUncorrectable, float64(unc))
		r.Set(gpu.FieldRowRemapPending, b2f(pending))
		r.Set(gpu.FieldRowRemapFailure, b2f(failed))
	}
	return ret
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// readViolation reads how long, in ns, a policy has held the clocks below
// their base: the DCGM_FI_DEV_*_VIOLATION counters.
func readViolation(policy gonvml.PerfPolicyType, f gpu.Field) func(*Backend, *gpuDevice, gonvml.Device, *gpu.Reading) gonvml.Return {
	return func(_ *Backend, _ *gpuDevice, d gonvml.Device, r *gpu.Reading) gonvml.Return {
		v, ret := d.GetViolationStatus(policy)
		if ret == gonvml.SUCCESS {
			r.Set(f, float64(v.ViolationTime))
		}
		return ret
	}
}

// readVGPULicense reads a vGPU guest's licence. On bare metal and in
// passthrough there is no licence to report: the field stays absent.
func readVGPULicense(_ *Backend, _ *gpuDevice, d gonvml.Device, r *gpu.Reading) gonvml.Return {
	mode, ret := d.GetVirtualizationMode()
	if ret != gonvml.SUCCESS || mode != gonvml.GPU_VIRTUALIZATION_MODE_VGPU {
		return ret
	}
	feats, ret := d.GetGridLicensableFeatures()
	if ret != gonvml.SUCCESS {
		return ret
	}
	licensed := 0.0
	for i := range min(int(feats.LicensableFeaturesCount), len(feats.GridLicensableFeatures)) {
		if feats.GridLicensableFeatures[i].FeatureState == gonvml.GRID_LICENSE_STATE_LICENSED {
			licensed = 1
		}
	}
	r.Set(gpu.FieldVGPULicensed, licensed)
	return gonvml.SUCCESS
}

// fabricInfo reads a GPU's fabric state through nvmlDeviceGetGpuFabricInfoV
// version 3, the first with the health summary. go-nvml binds it to the C
// library itself (GpuFabricInfoHandler), so tests replace the Backend's.
func fabricInfo(d gonvml.Device) (gonvml.GpuFabricInfo_v3, gonvml.Return) {
	return d.GetGpuFabricInfoV().V3()
}

// readFabricHealth reads the fabric health that dcgm-exporter 4.8.4's
// opt-in DCGM_FI_DEV_FABRIC_HEALTH_* fields serve. GPUs outside an NVSwitch
// fabric answer not supported; drivers without the call leave it absent.
func readFabricHealth(b *Backend, _ *gpuDevice, d gonvml.Device, r *gpu.Reading) gonvml.Return {
	if b.fabricInfo == nil {
		return gonvml.ERROR_FUNCTION_NOT_FOUND
	}
	info, ret := b.fabricInfo(d)
	if ret == gonvml.SUCCESS {
		r.Set(gpu.FieldFabricHealthSummary, float64(info.HealthSummary))
		r.Set(gpu.FieldFabricHealthMask, float64(info.HealthMask))
	}
	return ret
}
