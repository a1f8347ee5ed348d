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

// The fields every backend may report. Units are those of dcgm-exporter's
// 4.8 names (pkg/dcgm converts them for the 4.10 names).
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
	FieldNVLinkBandwidth                      // bytes/s, TX plus RX over every link, between two collections
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
	// The fields people alert on, beyond dcgm-exporter's defaults.
	FieldPowerMgmtLimit   // watts, the configured power management limit
	FieldECCSBEVolatile   // corrected (single-bit) ECC errors since driver load
	FieldECCDBEVolatile   // uncorrected (double-bit) ECC errors since driver load
	FieldECCSBEAggregate  // corrected ECC errors over the GPU's life
	FieldECCDBEAggregate  // uncorrected ECC errors over the GPU's life
	FieldRetiredPagesSBE  // pages retired for repeated single-bit errors
	FieldRetiredPagesDBE  // pages retired for double-bit errors
	FieldRetiredPending   // 1 when a page waits for retirement at the next reset
	FieldPowerViolation   // nanoseconds throttled by the power limit (counter)
	FieldThermalViolation // nanoseconds throttled for temperature
	FieldSyncBoostViolation
	FieldBoardLimitViolation
	FieldLowUtilViolation
	FieldReliabilityViolation
	FieldNVLinkCRCFlitErrors // over every link, since driver load
	FieldNVLinkCRCDataErrors
	FieldNVLinkReplayErrors
	FieldNVLinkRecoveryErrors
	FieldFabricHealthSummary // NVML_GPU_FABRIC_HEALTH_SUMMARY_*: 0 not supported, 1 healthy, 2 unhealthy, 3 limited capacity
	FieldFabricHealthMask    // NVML_GPU_FABRIC_HEALTH_MASK_* bits
	FieldFP64Active          // ratio, 0-1 (GPM)
	FieldFP32Active
	FieldFP16Active
	NumFields
)

// A Reading keeps one presence bit per field in a uint64.
var _ [64 - NumFields]struct{}

var fieldNames = [NumFields]string{
	"gpu_util", "mem_copy_util", "fb_used_mib", "fb_free_mib", "fb_reserved_mib",
	"fb_total_mib", "gpu_temp_c", "memory_temp_c", "power_usage_w", "power_limit_w",
	"energy_mj", "sm_clock_mhz", "mem_clock_mhz", "last_xid",
	"enc_util", "dec_util", "pcie_tx_kbps", "pcie_rx_kbps", "pcie_replays",
	"nvlink_bandwidth_bytes_per_s", "remapped_rows_correctable", "remapped_rows_uncorrectable",
	"row_remap_pending", "row_remap_failure", "vgpu_licensed",
	"gr_engine_active", "sm_active", "sm_occupancy", "tensor_active", "dram_active",
	"pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s", "nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s",
	"power_mgmt_limit_w", "ecc_sbe_volatile", "ecc_dbe_volatile", "ecc_sbe_aggregate", "ecc_dbe_aggregate",
	"retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending",
	"power_violation_ns", "thermal_violation_ns", "sync_boost_violation_ns", "board_limit_violation_ns",
	"low_util_violation_ns", "reliability_violation_ns",
	"nvlink_crc_flit_errors", "nvlink_crc_data_errors", "nvlink_replay_errors", "nvlink_recovery_errors",
	"fabric_health_summary", "fabric_health_mask", "fp64_active", "fp32_active", "fp16_active",
}

// String returns the field's name as used in the exporter's JSON API.
func (f Field) String() string {
	if f < NumFields {
		return fieldNames[f]
	}
	return "unknown"
}

// ParseField returns the field String names.
func ParseField(name string) (Field, bool) {
	for f := range NumFields {
		if fieldNames[f] == name {
			return f, true
		}
	}
	return 0, false
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
	// Err is set when the device could not be read this time (it is lost,
	// or cannot even be named); the device is then reported unhealthy and
	// none of its fields are exported. A single field that fails is not
	// the device's failure: it is left absent and listed in FieldErrors.
	Err error
	// FieldErrors are the fields that could not be read this time, each
	// with why; they are absent from the reading.
	FieldErrors []FieldError
	values      [NumFields]float64
	present     uint64
	// XIDCounts counts XID errors by code since the backend started. Its
	// codes are ValidXID and at most MaxXIDCodes.
	XIDCounts map[uint64]uint64
	// Processes are the compute processes on the device, with their share
	// of it since the previous collection; nil when the backend does not
	// read them.
	Processes []Process
}

// FieldError is one field a backend failed to read.
type FieldError struct {
	Field Field
	// Code names the failure, for NVML its return code
	// ("ERROR_UNKNOWN"); a small closed set, used as a label value.
	Code string
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
