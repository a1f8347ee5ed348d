// Package gpu defines what a GPU backend reports: the identity of every
// device (a whole GPU or a MIG instance) and one reading of its fields.
// Backends (NVML, simulated) fill these types; the exporter's collector turns
// them into metrics. Nothing here talks to hardware.
package gpu

import (
	"context"
)

// Field is one measurable quantity of a device. Readings keep a presence bit
// per field so that "not supported" is never confused with zero.
type Field uint8

// The fields every backend may report. Units are those dcgm-exporter uses.
const (
	FieldGPUUtil                 Field = iota // percent, 0-100
	FieldMemCopyUtil                          // percent, 0-100
	FieldFBUsed                               // MiB
	FieldFBFree                               // MiB
	FieldFBReserved                           // MiB
	FieldFBTotal                              // MiB
	FieldGPUTemp                              // degrees C
	FieldMemoryTemp                           // degrees C
	FieldPowerUsage                           // watts
	FieldPowerLimit                           // watts (enforced limit)
	FieldEnergy                               // millijoules since driver load (counter)
	FieldSMClock                              // MHz
	FieldMemClock                             // MHz
	FieldLastXID                              // code of the last XID error seen, 0 if none
	FieldEncUtil                              // percent, 0-100
	FieldDecUtil                              // percent, 0-100
	FieldPCIeTxThroughput                     // KB/s over the driver's last 20 ms
	FieldPCIeRxThroughput                     // KB/s over the driver's last 20 ms
	FieldPCIeReplay                           // PCIe replays since driver load (counter)
	FieldNVLinkBandwidth                      // bytes, TX plus RX over every link since driver load (counter)
	FieldRemappedRowsCorrectable              // rows remapped for correctable errors (counter)
	FieldRemappedRowsUncorrectable
	FieldRowRemapPending // 1 when a remap waits for a GPU reset
	FieldRowRemapFailure // 1 when a remap failed
	FieldVGPULicensed    // 1 licensed, 0 not (vGPU guests only)
	// Profiling fields (NVML GPM, Hopper and later): ratios from 0 to 1
	// and byte rates, as dcgm-exporter's DCGM_FI_PROF_* fields.
	FieldGREngineActive
	FieldSMActive
	FieldSMOccupancy
	FieldTensorActive
	FieldDRAMActive
	FieldPCIeTxBytes // bytes/s
	FieldPCIeRxBytes // bytes/s
	FieldNVLinkTxBytes
	FieldNVLinkRxBytes
	NumFields
)

var fieldNames = [NumFields]string{
	"gpu_util", "mem_copy_util", "fb_used_mib", "fb_free_mib", "fb_reserved_mib",
	"fb_total_mib", "gpu_temp_c", "memory_temp_c", "power_usage_w", "power_limit_w",
	"energy_mj", "sm_clock_mhz", "mem_clock_mhz", "last_xid",
	"enc_util", "dec_util", "pcie_tx_kbps", "pcie_rx_kbps", "pcie_replays",
	"nvlink_bandwidth_bps", "remapped_rows_correctable", "remapped_rows_uncorrectable",
	"row_remap_pending", "row_remap_failure", "vgpu_licensed",
	"gr_engine_active", "sm_active", "sm_occupancy", "tensor_active", "dram_active",
	"pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s", "nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s",
}

// String returns the field's name as used in the exporter's JSON API.
func (f Field) String() string {
	if f < NumFields {
		return fieldNames[f]
	}
	return "unknown"
}

// MIG describes a MIG instance. A Device with a nil MIG is a whole GPU.
type MIG struct {
	// UUID of the MIG device ("MIG-..."), as the device plugin and the
	// kubelet's pod-resources API name it.
	UUID              string `json:"uuid"`
	GPUInstanceID     int    `json:"gpuInstanceId"`
	ComputeInstanceID int    `json:"computeInstanceId"`
	// Profile is the GPU instance profile, for example "1g.10gb".
	Profile string `json:"profile"`
}

// Device identifies one exported device. For a MIG instance the GPU-level
// fields (Index, UUID, PCIBusID, ModelName, Minor) are the parent GPU's, as in
// dcgm-exporter, so that dashboards group instances under their GPU.
type Device struct {
	Index     int    // NVML index of the (parent) GPU: the "gpu" label
	Minor     int    // /dev/nvidiaN minor number: the "device" label
	UUID      string // parent GPU UUID ("GPU-...")
	ModelName string
	PCIBusID  string
	MIG       *MIG
}

// ID is the identifier the kubelet's pod-resources API uses for this
// device: the MIG UUID for a MIG instance, the GPU UUID otherwise.
func (d Device) ID() string {
	if d.MIG != nil {
		return d.MIG.UUID
	}
	return d.UUID
}

// XID codes are a closed set: NVIDIA's catalogue numbers them from 1 to
// about 160. Each code seen becomes one gpuscale_gpu_xid_errors_total
// series, so backends keep only codes in [MinXID, MaxXID] and at most
// MaxXIDCodes distinct ones per device; a driver bug or a hostile caller
// of the simulated backend cannot then grow the series without bound.
const (
	MinXID = 1
	// MaxXID leaves room for codes that drivers newer than the catalogue
	// add.
	MaxXID = 255
	// MaxXIDCodes is far above the handful of distinct codes a failing
	// GPU raises in practice.
	MaxXIDCodes = 32
)

// ValidXID reports whether code is in the range of XID codes.
func ValidXID(code uint64) bool { return code >= MinXID && code <= MaxXID }

// Reading is one collection of one device.
type Reading struct {
	Device Device
	// Err is set when the device could not be read this time; the device is
	// then reported unhealthy and none of its fields are exported.
	Err     error
	values  [NumFields]float64
	present uint64
	// XIDCounts counts XID errors by code since the backend started. Its
	// codes are ValidXID and at most MaxXIDCodes.
	XIDCounts map[uint64]uint64
	// Processes are the compute processes on the device, with their share
	// of it since the previous collection; nil when the backend does not
	// read them.
	Processes []Process
}

// Process is one process using a device. Its utilization is the mean of
// the driver's samples since the previous collection, so that the shares
// of every process on a time-sliced GPU add up to the device's
// utilization within the driver's sampling.
type Process struct {
	PID uint32
	// SMUtil and MemUtil are percents of the device; HasUtil is false
	// when the driver had no sample of the process in the window.
	SMUtil, MemUtil float64
	HasUtil         bool
	// UsedMemoryMiB is the framebuffer memory the process holds; HasMemory
	// is false where the driver cannot tell (Windows WDDM, some vGPUs).
	UsedMemoryMiB float64
	HasMemory     bool
}

// Set records a field's value.
func (r *Reading) Set(f Field, v float64) {
	r.values[f] = v
	r.present |= 1 << uint64(f)
}

// Get returns a field's value and whether the backend reported it.
func (r *Reading) Get(f Field) (float64, bool) {
	if f >= NumFields || r.present&(1<<uint64(f)) == 0 {
		return 0, false
	}
	return r.values[f], true
}

// Healthy reports whether the device was read successfully.
func (r *Reading) Healthy() bool { return r.Err == nil }

// FatalXIDs are the XID codes that mean a GPU or its driver needs
// attention (uncorrectable ECC error 48, NVLink error 74, fallen off the
// bus 79, contained and uncontained ECC errors 94 and 95, and the like).
// Their counters are served at 0 from the start, so that increase() in an
// alert sees the first one.
var FatalXIDs = []uint64{48, 63, 64, 74, 79, 92, 94, 95, 119, 120}

// Kind is a backend's kind.
type Kind uint8

const (
	KindNVML Kind = iota + 1
	// KindSim is the simulated backend: every series it feeds is marked
	// simulated.
	KindSim
)

// String returns "nvml" or "sim", the --backend flag's values.
func (k Kind) String() string {
	switch k {
	case KindNVML:
		return "nvml"
	case KindSim:
		return "sim"
	}
	return "unknown"
}

// Simulated reports whether the kind serves made-up data.
func (k Kind) Simulated() bool { return k == KindSim }

// Backend reads every device on the node. It is consumed by the exporter's
// collection loop, which is its only caller (no concurrent Collect calls).
type Backend interface {
	// Kind is the backend's kind.
	Kind() Kind
	// DriverVersion is the driver version label value.
	DriverVersion() string
	// Collect reads every device. Failures of one device are reported in its
	// Reading; an error means nothing could be read at all.
	Collect(ctx context.Context) ([]Reading, error)
	// Close releases the backend's resources.
	Close() error
}
