//go:build linux && cgo

package nvml

import (
	"encoding/binary"
	"errors"
	"math"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// fieldReader reads one NVML query into r. It sets fields only on success
// and returns check's verdict, so unsupported fields stay absent.
type fieldReader func(b *Backend, d gonvml.Device, r *gpu.Reading) error

// gpuFields are read for every whole GPU.
var gpuFields = []fieldReader{
	readUtilization,
	readMemory,
	readTemperature,
	readMemoryTemperature,
	readPowerUsage,
	readPowerLimit,
	readEnergy,
	readClocks,
	readEncDec,
	readPCIe,
	readRemappedRows,
	readNVLink,
	readVGPULicense,
}

// migFields are read for MIG device handles. Temperature, power and clocks
// belong to the whole GPU and are reported there, as dcgm-exporter does.
var migFields = []fieldReader{
	readUtilization,
	readMemory,
}

// readFields runs readers in order. It stops at the first real error: a GPU
// that is lost fails every call, and one clear error is enough.
func (b *Backend) readFields(d gonvml.Device, r *gpu.Reading, readers []fieldReader) error {
	for _, read := range readers {
		if err := read(b, d, r); err != nil && !errors.Is(err, errSkip) {
			return err
		}
	}
	return nil
}

const mib = 1 << 20

func readUtilization(_ *Backend, d gonvml.Device, r *gpu.Reading) error {
	u, ret := d.GetUtilizationRates()
	if err := check("get utilization rates", ret); err != nil {
		return err
	}
	r.Set(gpu.FieldGPUUtil, float64(u.Gpu))
	r.Set(gpu.FieldMemCopyUtil, float64(u.Memory))
	return nil
}

// readMemory prefers the v2 call, which reports reserved memory separately;
// older drivers and some handles only answer v1. Values are whole MiB, as
// dcgm-exporter reports them.
func readMemory(b *Backend, d gonvml.Device, r *gpu.Reading) error {
	if b.memV2 {
		m, ret := d.GetMemoryInfo_v2()
		switch ret {
		case gonvml.SUCCESS:
			r.Set(gpu.FieldFBUsed, float64(m.Used/mib))
			r.Set(gpu.FieldFBFree, float64(m.Free/mib))
			r.Set(gpu.FieldFBReserved, float64(m.Reserved/mib))
			r.Set(gpu.FieldFBTotal, float64(m.Total/mib))
			return nil
		case gonvml.ERROR_NOT_SUPPORTED, gonvml.ERROR_FUNCTION_NOT_FOUND:
			// Fall back to v1 below.
		default:
			return check("get memory info v2", ret)
		}
	}
	m, ret := d.GetMemoryInfo()
	if err := check("get memory info", ret); err != nil {
		return err
	}
	r.Set(gpu.FieldFBUsed, float64(m.Used/mib))
	r.Set(gpu.FieldFBFree, float64(m.Free/mib))
	r.Set(gpu.FieldFBTotal, float64(m.Total/mib))
	return nil
}

func readTemperature(_ *Backend, d gonvml.Device, r *gpu.Reading) error {
	t, ret := d.GetTemperature(gonvml.TEMPERATURE_GPU)
	if err := check("get GPU temperature", ret); err != nil {
		return err
	}
	r.Set(gpu.FieldGPUTemp, float64(t))
	return nil
}

// readMemoryTemperature uses the field-value API, the only NVML route to
// the HBM temperature. Each value carries its own return code and type.
func readMemoryTemperature(_ *Backend, d gonvml.Device, r *gpu.Reading) error {
	const op = "get memory temperature"
	values := []gonvml.FieldValue{{FieldId: gonvml.FI_DEV_MEMORY_TEMP}}
	if err := check(op, d.GetFieldValues(values)); err != nil {
		return err
	}
	if err := check(op, gonvml.Return(values[0].NvmlReturn)); err != nil {
		return err
	}
	v, ok := decodeFieldValue(values[0])
	if !ok {
		return errSkip
	}
	r.Set(gpu.FieldMemoryTemp, v)
	return nil
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

func readPowerUsage(_ *Backend, d gonvml.Device, r *gpu.Reading) error {
	mw, ret := d.GetPowerUsage()
	if err := check("get power usage", ret); err != nil {
		return err
	}
	r.Set(gpu.FieldPowerUsage, float64(mw)/1000)
	return nil
}

func readPowerLimit(_ *Backend, d gonvml.Device, r *gpu.Reading) error {
	mw, ret := d.GetEnforcedPowerLimit()
	if err := check("get enforced power limit", ret); err != nil {
		return err
	}
	r.Set(gpu.FieldPowerLimit, float64(mw)/1000)
	return nil
}

func readEnergy(_ *Backend, d gonvml.Device, r *gpu.Reading) error {
	mj, ret := d.GetTotalEnergyConsumption()
	if err := check("get total energy consumption", ret); err != nil {
		return err
	}
	r.Set(gpu.FieldEnergy, float64(mj))
	return nil
}

func readClocks(_ *Backend, d gonvml.Device, r *gpu.Reading) error {
	clocks := []struct {
		op    string
		clock gonvml.ClockType
		field gpu.Field
	}{
		{"get SM clock", gonvml.CLOCK_SM, gpu.FieldSMClock},
		{"get memory clock", gonvml.CLOCK_MEM, gpu.FieldMemClock},
	}
	for _, c := range clocks {
		mhz, ret := d.GetClockInfo(c.clock)
		if err := check(c.op, ret); errors.Is(err, errSkip) {
			continue
		} else if err != nil {
			return err
		}
		r.Set(c.field, float64(mhz))
	}
	return nil
}

func readEncDec(_ *Backend, d gonvml.Device, r *gpu.Reading) error {
	enc, _, ret := d.GetEncoderUtilization()
	if err := check("get encoder utilization", ret); err == nil {
		r.Set(gpu.FieldEncUtil, float64(enc))
	} else if !errors.Is(err, errSkip) {
		return err
	}
	dec, _, ret := d.GetDecoderUtilization()
	if err := check("get decoder utilization", ret); err != nil {
		return err
	}
	r.Set(gpu.FieldDecUtil, float64(dec))
	return nil
}

// readPCIe reads the replay counter and the throughput NVML samples over
// 20 ms, in KB/s, as dcgm-exporter's PCIE_TX/RX_THROUGHPUT.
func readPCIe(_ *Backend, d gonvml.Device, r *gpu.Reading) error {
	replays, ret := d.GetPcieReplayCounter()
	if err := check("get PCIe replay counter", ret); err == nil {
		r.Set(gpu.FieldPCIeReplay, float64(replays))
	} else if !errors.Is(err, errSkip) {
		return err
	}
	for _, c := range []struct {
		counter gonvml.PcieUtilCounter
		field   gpu.Field
	}{{gonvml.PCIE_UTIL_TX_BYTES, gpu.FieldPCIeTxThroughput}, {gonvml.PCIE_UTIL_RX_BYTES, gpu.FieldPCIeRxThroughput}} {
		kbps, ret := d.GetPcieThroughput(c.counter)
		if err := check("get PCIe throughput", ret); errors.Is(err, errSkip) {
			continue
		} else if err != nil {
			return err
		}
		r.Set(c.field, float64(kbps))
	}
	return nil
}

// readRemappedRows reads the row remapper (Ampere and later HBM GPUs).
func readRemappedRows(_ *Backend, d gonvml.Device, r *gpu.Reading) error {
	corr, unc, pending, failed, ret := d.GetRemappedRows()
	if err := check("get remapped rows", ret); err != nil {
		return err
	}
	r.Set(gpu.FieldRemappedRowsCorrectable, float64(corr))
	r.Set(gpu.FieldRemappedRowsUncorrectable, float64(unc))
	r.Set(gpu.FieldRowRemapPending, b2f(pending))
	r.Set(gpu.FieldRowRemapFailure, b2f(failed))
	return nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// allLinks is NVML's scope for a field summed over every NVLink (UINT_MAX).
const allLinks = ^uint32(0)

// readNVLink reads the NVLink data counters, in KiB since driver load,
// summed over every link. A GPU without NVLink answers not supported.
func readNVLink(_ *Backend, d gonvml.Device, r *gpu.Reading) error {
	const op = "get NVLink throughput"
	values := []gonvml.FieldValue{
		{FieldId: gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ScopeId: allLinks},
		{FieldId: gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ScopeId: allLinks},
	}
	if err := check(op, d.GetFieldValues(values)); err != nil {
		return err
	}
	var kib float64
	for _, v := range values {
		if err := check(op, gonvml.Return(v.NvmlReturn)); err != nil {
			return err
		}
		n, ok := decodeFieldValue(v)
		if !ok {
			return errSkip
		}
		kib += n
	}
	r.Set(gpu.FieldNVLinkBandwidth, kib*1024)
	return nil
}

// readVGPULicense reads a vGPU guest's licence. On bare metal and in
// passthrough there is no licence to report: the field stays absent.
func readVGPULicense(_ *Backend, d gonvml.Device, r *gpu.Reading) error {
	mode, ret := d.GetVirtualizationMode()
	if err := check("get virtualization mode", ret); err != nil {
		return err
	}
	if mode != gonvml.GPU_VIRTUALIZATION_MODE_VGPU {
		return errSkip
	}
	feats, ret := d.GetGridLicensableFeatures()
	if err := check("get vGPU licensable features", ret); err != nil {
		return err
	}
	licensed := 0.0
	for i := range min(int(feats.LicensableFeaturesCount), len(feats.GridLicensableFeatures)) {
		if feats.GridLicensableFeatures[i].FeatureState == gonvml.GRID_LICENSE_STATE_LICENSED {
			licensed = 1
		}
	}
	r.Set(gpu.FieldVGPULicensed, licensed)
	return nil
}
