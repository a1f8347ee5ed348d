package gpu

import (
	"fmt"

	"github.com/gpuscale/gpuscale/pkg/gpu/dcgm"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// Field is one measurable quantity of a device. Readings keep a presence bit
// per field so that "not supported" is never confused with zero.
type Field uint8

// The fields every backend may report, each described by its entry in
// Specs. Units are those of dcgm-exporter's 4.8 names (Spec.Unit).
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

// Spec is everything gpuscale knows of one field, in one place: what the
// backends read into it, what dcgm-exporter calls it in each naming
// schema, and what the adapter makes of it. Every consumer walks Specs:
// the NVML backend and the simulator must fill every field (their tests
// fail naming the one they miss), pkg/metrics renders every DCGM name,
// and the adapter's ingest and PromQL defaults read every field with a
// Feed.
type Spec struct {
	Field Field
	// Name is the field's name in the exporter's JSON API (Field.String).
	Name string
	// Unit is the unit backends report the field in: that of its
	// dcgm-exporter 4.8 name.
	Unit dcgm.Unit
	// NVML says where the NVML backend reads the field and how it is
	// converted to Unit (docs/dcgm-compatibility.md's NVML column). The
	// call itself sits in pkg/exporter/backend/nvml, keyed by the field, since it needs
	// cgo.
	NVML string
	// DCGM are the dcgm-exporter series the field fills, with their names,
	// units, types and help in each schema; usually one. The order of
	// Specs, and of DCGM within an entry, is the order of
	// docs/dcgm-compatibility.md's rows.
	DCGM []dcgm.Field
	// Feed says which adapter signal the field feeds; nil for none.
	Feed *Feed
}

// Feed is how the adapter reads a field into one of its signals, through
// its own scrape (pkg/adapter/ingest) and through PromQL (pkg/adapter/promsource).
type Feed struct {
	// Signal is the signal the field feeds (a SourceGPU one). A device's
	// reading times Scale must lie in the signal's per-device range.
	Signal signal.Signal
	// Agg is how the devices of a pod or a node combine.
	Agg Agg
	// Scale converts a value in Unit to the signal's unit.
	Scale float64
}

// Agg is how a signal combines the devices of a pod or a node.
type Agg uint8

const (
	// Mean is the mean over the devices that report the field (MIG
	// instances report no utilization or activity).
	Mean Agg = iota + 1
	// Sum is the sum over the devices.
	Sum
	// Part is one part of a signal computed from several fields: the
	// framebuffer's free and reserved memory, which with the memory used
	// make gpu_memory_utilization. The code that computes the signal names
	// its parts (pkg/adapter/ingest, pkg/adapter/promsource), and their tests check that
	// it names every Part.
	Part
)

// String names the aggregation, for tests and errors.
func (a Agg) String() string {
	switch a {
	case Mean:
		return "mean"
	case Sum:
		return "sum"
	case Part:
		return "part"
	}
	return fmt.Sprintf("agg(%d)", uint8(a))
}

// Specs describes every field, one entry each. A new field is a constant
// above and an entry here; the per-field code it needs (an NVML call, the
// simulator's physics) sits in the backend, keyed by the constant, and the
// tests that walk Specs fail, naming the field, until it is there.
//
// Sources of the DCGM names: the 4.8 names, types and help strings are
// dcgm-exporter's etc/default-counters.csv up to 4.8.4 and, for the
// power-limit and fabric fields, 4.8.4's release notes. The 4.10 names are
// the DCGM field names dcgm-exporter 4.9 renamed to: where the rename kept
// the unit, the name DCGM's own header gives the deprecated one
// (dcgm_fields.h, "renamed per DCGM Field Naming Standard"); where the unit
// changed (the eleven fields 4.9's notes list: clocks, energy,
// utilization, framebuffer, NVLink) the name DCGM's naming standard
// (dcgm_field_naming.py: subsystem, property, unit, RATIO or TOTAL suffix)
// gives it, beside DCGM 4.7's BAR1_*_BYTES; the four profiling rates are
// 4.10's release notes'. docs/dcgm-compatibility.md marks which is which.
var Specs = []Spec{
	// dcgm-exporter's default collector.
	{Field: FieldSMClock, Name: "sm_clock_mhz", Unit: dcgm.MHz,
		NVML: "`nvmlDeviceGetClockInfo(SM)` (MHz)",
		DCGM: []dcgm.Field{
			{Name48: dcgm.SMClock, Name410: "DCGM_FI_DEV_SM_CLOCK_HERTZ", Unit48: dcgm.MHz, Unit410: dcgm.Hz, Type: dcgm.Gauge,
				Help: "SM clock frequency (in %s).", Default48: true, Default410: true},
		}},
	{Field: FieldMemClock, Name: "mem_clock_mhz", Unit: dcgm.MHz,
		NVML: "`nvmlDeviceGetClockInfo(MEM)` (MHz)",
		DCGM: []dcgm.Field{
			{Name48: dcgm.MemClock, Name410: "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", Unit48: dcgm.MHz, Unit410: dcgm.Hz, Type: dcgm.Gauge,
				Help: "Memory clock frequency (in %s).", Default48: true, Default410: true},
		}},
	{Field: FieldMemoryTemp, Name: "memory_temp_c", Unit: dcgm.Celsius,
		NVML: "field value `NVML_FI_DEV_MEMORY_TEMP` (HBM GPUs)",
		DCGM: []dcgm.Field{
			{Name48: dcgm.MemoryTemp, Name410: "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", Unit48: dcgm.Celsius, Unit410: dcgm.Celsius, Type: dcgm.Gauge,
				Help: "Memory temperature (in %s).", Default48: true, Default410: true},
		}},
	{Field: FieldGPUTemp, Name: "gpu_temp_c", Unit: dcgm.Celsius,
		NVML: "`nvmlDeviceGetTemperature(GPU)`",
		DCGM: []dcgm.Field{
			{Name48: dcgm.GPUTemp, Name410: "DCGM_FI_DEV_GPU_TEMP_CELSIUS", Unit48: dcgm.Celsius, Unit410: dcgm.Celsius, Type: dcgm.Gauge,
				Help: "GPU temperature (in %s).", Default48: true, Default410: true},
		}},
	{Field: FieldPowerUsage, Name: "power_usage_w", Unit: dcgm.Watts,
		NVML: "`nvmlDeviceGetPowerUsage`, mW to W",
		Feed: &Feed{Signal: signal.GPUPowerWatts, Agg: Sum, Scale: 1},
		DCGM: []dcgm.Field{
			{Name48: dcgm.PowerUsage, Name410: dcgm.BoardPowerWatts, Unit48: dcgm.Watts, Unit410: dcgm.Watts, Type: dcgm.Gauge,
				Help: "Power draw (in %s).", Default48: true, Default410: true},
		}},
	{Field: FieldEnergy, Name: "energy_mj", Unit: dcgm.Millijoules,
		NVML: "`nvmlDeviceGetTotalEnergyConsumption` (mJ)",
		DCGM: []dcgm.Field{
			{Name48: dcgm.TotalEnergyConsumption, Name410: "DCGM_FI_DEV_BOARD_ENERGY_JOULES_TOTAL", Unit48: dcgm.Millijoules, Unit410: dcgm.Joules, Type: dcgm.Counter,
				Help: "Total energy consumption since boot (in %s).", Default48: true, Default410: true},
		}},
	{Field: FieldPCIeReplay, Name: "pcie_replays", Unit: dcgm.None,
		NVML: "`nvmlDeviceGetPcieReplayCounter`",
		DCGM: []dcgm.Field{
			{Name48: dcgm.PCIeReplayCounter, Name410: "DCGM_FI_DEV_PCIE_REPLAY_TOTAL", Type: dcgm.Counter,
				Help: "Total number of PCIe retries.", Default48: true, Default410: true},
		}},
	{Field: FieldGPUUtil, Name: "gpu_util", Unit: dcgm.Percent,
		NVML: "`nvmlDeviceGetUtilizationRates`; per pod's own share on a shared GPU",
		Feed: &Feed{Signal: signal.GPUUtilization, Agg: Mean, Scale: 1},
		DCGM: []dcgm.Field{
			{Name48: dcgm.GPUUtil, Name410: dcgm.GPUUtilRatio, Unit48: dcgm.Percent, Unit410: dcgm.Ratio, Type: dcgm.Gauge,
				Help: "GPU utilization (in %s).", Default48: true, Default410: true},
		}},
	{Field: FieldMemCopyUtil, Name: "mem_copy_util", Unit: dcgm.Percent,
		NVML: "`nvmlDeviceGetUtilizationRates`",
		DCGM: []dcgm.Field{
			{Name48: dcgm.MemCopyUtil, Name410: "DCGM_FI_DEV_MEMORY_COPY_UTIL_RATIO", Unit48: dcgm.Percent, Unit410: dcgm.Ratio, Type: dcgm.Gauge,
				Help: "Memory utilization (in %s).", Default48: true, Default410: true},
		}},
	{Field: FieldEncUtil, Name: "enc_util", Unit: dcgm.Percent,
		NVML: "`nvmlDeviceGetEncoderUtilization`",
		DCGM: []dcgm.Field{
			{Name48: dcgm.EncUtil, Name410: "DCGM_FI_DEV_ENC_UTIL_RATIO", Unit48: dcgm.Percent, Unit410: dcgm.Ratio, Type: dcgm.Gauge,
				Help: "Encoder utilization (in %s).", Default48: true, Default410: true},
		}},
	{Field: FieldDecUtil, Name: "dec_util", Unit: dcgm.Percent,
		NVML: "`nvmlDeviceGetDecoderUtilization`",
		DCGM: []dcgm.Field{
			{Name48: dcgm.DecUtil, Name410: "DCGM_FI_DEV_DEC_UTIL_RATIO", Unit48: dcgm.Percent, Unit410: dcgm.Ratio, Type: dcgm.Gauge,
				Help: "Decoder utilization (in %s).", Default48: true, Default410: true},
		}},
	{Field: FieldLastXID, Name: "last_xid", Unit: dcgm.None,
		NVML: "XID critical-error events (`nvmlEventSetWait`): the last code, 0 if none",
		DCGM: []dcgm.Field{
			{Name48: dcgm.XIDErrors, Name410: "DCGM_FI_DEV_XID_ERROR", Type: dcgm.Gauge,
				Help: "Value of the last XID error encountered.", Default48: true, Default410: true},
		}},
	{Field: FieldFBFree, Name: "fb_free_mib", Unit: dcgm.MiB,
		NVML: "`nvmlDeviceGetMemoryInfo_v2` (v1), whole MiB",
		Feed: &Feed{Signal: signal.GPUMemoryUtilization, Agg: Part, Scale: 1 << 20},
		DCGM: []dcgm.Field{
			{Name48: dcgm.FBFree, Name410: dcgm.FBFreeBytes, Unit48: dcgm.MiB, Unit410: dcgm.Bytes, Type: dcgm.Gauge,
				Help: "Framebuffer memory free (in %s).", Default48: true, Default410: true},
		}},
	{Field: FieldFBUsed, Name: "fb_used_mib", Unit: dcgm.MiB,
		NVML: "`nvmlDeviceGetMemoryInfo_v2` (v1 on old drivers), whole MiB; per pod's share on a shared GPU",
		Feed: &Feed{Signal: signal.GPUMemoryUsedBytes, Agg: Sum, Scale: 1 << 20},
		DCGM: []dcgm.Field{
			{Name48: dcgm.FBUsed, Name410: dcgm.FBUsedBytes, Unit48: dcgm.MiB, Unit410: dcgm.Bytes, Type: dcgm.Gauge,
				Help: "Framebuffer memory used (in %s).", Default48: true, Default410: true},
		}},
	{Field: FieldFBReserved, Name: "fb_reserved_mib", Unit: dcgm.MiB,
		NVML: "`nvmlDeviceGetMemoryInfo_v2`; absent on drivers with v1 only",
		Feed: &Feed{Signal: signal.GPUMemoryUtilization, Agg: Part, Scale: 1 << 20},
		DCGM: []dcgm.Field{
			{Name48: dcgm.FBReserved, Name410: dcgm.FBReservedBytes, Unit48: dcgm.MiB, Unit410: dcgm.Bytes, Type: dcgm.Gauge,
				Help: "Framebuffer memory reserved (in %s).", Default48: true, Default410: true},
		}},
	{Field: FieldFBTotal, Name: "fb_total_mib", Unit: dcgm.MiB,
		NVML: "`nvmlDeviceGetMemoryInfo_v2` (v1), whole MiB",
		DCGM: []dcgm.Field{
			{Name48: dcgm.FBCapacityBytes, Name410: dcgm.FBCapacityBytes, Unit48: dcgm.Bytes, Unit410: dcgm.Bytes, Type: dcgm.Gauge,
				Help: "Total GPU memory (in %s).", Default410: true},
			{Name48: dcgm.FBTotal, Unit48: dcgm.MiB, Type: dcgm.Gauge,
				Help: "Total framebuffer memory (in %s)."},
		}},
	{Field: FieldNVLinkBandwidth, Name: "nvlink_bandwidth_bytes_per_s", Unit: dcgm.BytesPerSecond,
		NVML: "field values `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX` + `_RX`, every link (scope UINT_MAX), KiB counters turned into a rate between collections; absent without NVLink",
		DCGM: []dcgm.Field{
			{Name48: dcgm.NVLinkBandwidthTotal, Name410: "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL", Unit48: dcgm.MBPerSecond, Unit410: dcgm.BytesPerSecond, Type: dcgm.Counter,
				Help: "NVLink throughput over every link, TX plus RX (in %s).", Default48: true, Default410: true},
		}},
	{Field: FieldVGPULicensed, Name: "vgpu_licensed", Unit: dcgm.None,
		NVML: "`nvmlDeviceGetGridLicensableFeatures` in vGPU guests; absent on bare metal and in passthrough",
		DCGM: []dcgm.Field{
			{Name48: dcgm.VGPULicenseStatus, Name410: dcgm.VGPULicenseStatus, Type: dcgm.Gauge,
				Help: "vGPU License status", Default48: true, Default410: true},
		}},
	{Field: FieldRemappedRowsUncorrectable, Name: "remapped_rows_uncorrectable", Unit: dcgm.None,
		NVML: "`nvmlDeviceGetRemappedRows`",
		DCGM: []dcgm.Field{
			{Name48: dcgm.UncorrectableRemappedRows, Name410: "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", Type: dcgm.Counter,
				Help: "Number of remapped rows for uncorrectable errors", Default48: true, Default410: true},
		}},
	{Field: FieldRemappedRowsCorrectable, Name: "remapped_rows_correctable", Unit: dcgm.None,
		NVML: "`nvmlDeviceGetRemappedRows` (Ampere and later)",
		DCGM: []dcgm.Field{
			{Name48: dcgm.CorrectableRemappedRows, Name410: "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL", Type: dcgm.Counter,
				Help: "Number of remapped rows for correctable errors", Default48: true, Default410: true},
		}},
	{Field: FieldRowRemapFailure, Name: "row_remap_failure", Unit: dcgm.None,
		NVML: "`nvmlDeviceGetRemappedRows`",
		DCGM: []dcgm.Field{
			{Name48: dcgm.RowRemapFailure, Name410: "DCGM_FI_DEV_ROW_REMAP_FAILED", Type: dcgm.Gauge,
				Help: "Whether remapping of rows has failed", Default48: true, Default410: true},
		}},
	{Field: FieldGREngineActive, Name: "gr_engine_active", Unit: dcgm.Ratio,
		NVML: "GPM `GRAPHICS_UTIL` / 100 (Hopper and later)",
		DCGM: []dcgm.Field{
			{Name48: dcgm.ProfGREngineActive, Name410: "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", Unit48: dcgm.Ratio, Unit410: dcgm.Ratio, Type: dcgm.Gauge,
				Help: "Ratio of time the graphics engine is active.", Default48: true, Default410: true},
		}},
	{Field: FieldTensorActive, Name: "tensor_active", Unit: dcgm.Ratio,
		NVML: "GPM `ANY_TENSOR_UTIL` / 100",
		Feed: &Feed{Signal: signal.GPUTensorActive, Agg: Mean, Scale: 100},
		DCGM: []dcgm.Field{
			{Name48: dcgm.ProfTensorActive, Name410: dcgm.ProfTensorUtilRate, Unit48: dcgm.Ratio, Unit410: dcgm.Ratio, Type: dcgm.Gauge,
				Help: "Ratio of cycles the tensor (HMMA) pipe is active.", Default48: true, Default410: true},
		}},
	{Field: FieldDRAMActive, Name: "dram_active", Unit: dcgm.Ratio,
		NVML: "GPM `DRAM_BW_UTIL` / 100",
		DCGM: []dcgm.Field{
			{Name48: dcgm.ProfDRAMActive, Name410: "DCGM_FI_PROF_DRAM_UTIL_RATIO", Unit48: dcgm.Ratio, Unit410: dcgm.Ratio, Type: dcgm.Gauge,
				Help: "Ratio of cycles the device memory interface is active sending or receiving data.", Default48: true, Default410: true},
		}},
	{Field: FieldPCIeTxBytes, Name: "pcie_tx_bytes_per_s", Unit: dcgm.BytesPerSecond,
		NVML: "GPM `PCIE_TX_PER_SEC`",
		DCGM: []dcgm.Field{
			{Name48: dcgm.ProfPCIeTxBytes, Name49: dcgm.ProfPCIeTxBytes, Name410: "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND", Unit48: dcgm.BytesPerSecond, Unit410: dcgm.BytesPerSecond, Type: dcgm.Gauge,
				Help: "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", Default48: true, Default410: true},
		}},
	{Field: FieldPCIeRxBytes, Name: "pcie_rx_bytes_per_s", Unit: dcgm.BytesPerSecond,
		NVML: "GPM `PCIE_RX_PER_SEC`",
		DCGM: []dcgm.Field{
			{Name48: dcgm.ProfPCIeRxBytes, Name49: dcgm.ProfPCIeRxBytes, Name410: "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND", Unit48: dcgm.BytesPerSecond, Unit410: dcgm.BytesPerSecond, Type: dcgm.Gauge,
				Help: "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", Default48: true, Default410: true},
		}},
	// The collector's commented rows (opt-in in dcgm-exporter), served.
	{Field: FieldPowerViolation, Name: "power_violation_ns", Unit: dcgm.Nanoseconds,
		NVML: "`nvmlDeviceGetViolationStatus(POWER)`, ns",
		DCGM: []dcgm.Field{
			{Name48: dcgm.PowerViolation, Name410: dcgm.PowerViolation, Unit48: dcgm.Nanoseconds, Unit410: dcgm.Nanoseconds, Type: dcgm.Counter,
				Help: "Throttling duration due to power constraints (in %s)."},
		}},
	{Field: FieldThermalViolation, Name: "thermal_violation_ns", Unit: dcgm.Nanoseconds,
		NVML: "`nvmlDeviceGetViolationStatus(THERMAL)`, ns",
		DCGM: []dcgm.Field{
			{Name48: dcgm.ThermalViolation, Name410: dcgm.ThermalViolation, Unit48: dcgm.Nanoseconds, Unit410: dcgm.Nanoseconds, Type: dcgm.Counter,
				Help: "Throttling duration due to thermal constraints (in %s)."},
		}},
	{Field: FieldSyncBoostViolation, Name: "sync_boost_violation_ns", Unit: dcgm.Nanoseconds,
		NVML: "`nvmlDeviceGetViolationStatus(SYNC_BOOST)`, ns",
		DCGM: []dcgm.Field{
			{Name48: dcgm.SyncBoostViolation, Name410: dcgm.SyncBoostViolation, Unit48: dcgm.Nanoseconds, Unit410: dcgm.Nanoseconds, Type: dcgm.Counter,
				Help: "Throttling duration due to sync-boost constraints (in %s)."},
		}},
	{Field: FieldBoardLimitViolation, Name: "board_limit_violation_ns", Unit: dcgm.Nanoseconds,
		NVML: "`nvmlDeviceGetViolationStatus(BOARD_LIMIT)`, ns",
		DCGM: []dcgm.Field{
			{Name48: dcgm.BoardLimitViolation, Name410: dcgm.BoardLimitViolation, Unit48: dcgm.Nanoseconds, Unit410: dcgm.Nanoseconds, Type: dcgm.Counter,
				Help: "Throttling duration due to board limit constraints (in %s)."},
		}},
	{Field: FieldLowUtilViolation, Name: "low_util_violation_ns", Unit: dcgm.Nanoseconds,
		NVML: "`nvmlDeviceGetViolationStatus(LOW_UTILIZATION)`, ns",
		DCGM: []dcgm.Field{
			{Name48: dcgm.LowUtilViolation, Name410: dcgm.LowUtilViolation, Unit48: dcgm.Nanoseconds, Unit410: dcgm.Nanoseconds, Type: dcgm.Counter,
				Help: "Throttling duration due to low utilization (in %s)."},
		}},
	{Field: FieldReliabilityViolation, Name: "reliability_violation_ns", Unit: dcgm.Nanoseconds,
		NVML: "`nvmlDeviceGetViolationStatus(RELIABILITY)`, ns",
		DCGM: []dcgm.Field{
			{Name48: dcgm.ReliabilityViolation, Name410: dcgm.ReliabilityViolation, Unit48: dcgm.Nanoseconds, Unit410: dcgm.Nanoseconds, Type: dcgm.Counter,
				Help: "Throttling duration due to reliability constraints (in %s)."},
		}},
	{Field: FieldECCSBEVolatile, Name: "ecc_sbe_volatile", Unit: dcgm.None,
		NVML: "field value `NVML_FI_DEV_ECC_SBE_VOL_TOTAL`",
		DCGM: []dcgm.Field{
			{Name48: dcgm.ECCSBEVolTotal, Name410: dcgm.ECCSBEVolTotal, Type: dcgm.Counter,
				Help: "Total number of single-bit volatile ECC errors."},
		}},
	{Field: FieldECCDBEVolatile, Name: "ecc_dbe_volatile", Unit: dcgm.None,
		NVML: "field value `NVML_FI_DEV_ECC_DBE_VOL_TOTAL`",
		DCGM: []dcgm.Field{
			{Name48: dcgm.ECCDBEVolTotal, Name410: dcgm.ECCDBEVolTotal, Type: dcgm.Counter,
				Help: "Total number of double-bit volatile ECC errors."},
		}},
	{Field: FieldECCSBEAggregate, Name: "ecc_sbe_aggregate", Unit: dcgm.None,
		NVML: "field value `NVML_FI_DEV_ECC_SBE_AGG_TOTAL`",
		DCGM: []dcgm.Field{
			{Name48: dcgm.ECCSBEAggTotal, Name410: dcgm.ECCSBEAggTotal, Type: dcgm.Counter,
				Help: "Total number of single-bit persistent ECC errors."},
		}},
	{Field: FieldECCDBEAggregate, Name: "ecc_dbe_aggregate", Unit: dcgm.None,
		NVML: "field value `NVML_FI_DEV_ECC_DBE_AGG_TOTAL`",
		DCGM: []dcgm.Field{
			{Name48: dcgm.ECCDBEAggTotal, Name410: dcgm.ECCDBEAggTotal, Type: dcgm.Counter,
				Help: "Total number of double-bit persistent ECC errors."},
		}},
	{Field: FieldRetiredPagesSBE, Name: "retired_pages_sbe", Unit: dcgm.None,
		NVML: "field value `NVML_FI_DEV_RETIRED_SBE` (pre-Ampere page retirement)",
		DCGM: []dcgm.Field{
			{Name48: dcgm.RetiredSBE, Name410: "DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL", Type: dcgm.Counter,
				Help: "Total number of retired pages due to single-bit errors."},
		}},
	{Field: FieldRetiredPagesDBE, Name: "retired_pages_dbe", Unit: dcgm.None,
		NVML: "field value `NVML_FI_DEV_RETIRED_DBE`",
		DCGM: []dcgm.Field{
			{Name48: dcgm.RetiredDBE, Name410: "DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL", Type: dcgm.Counter,
				Help: "Total number of retired pages due to double-bit errors."},
		}},
	{Field: FieldRetiredPending, Name: "retired_pages_pending", Unit: dcgm.None,
		NVML: "field value `NVML_FI_DEV_RETIRED_PENDING`",
		DCGM: []dcgm.Field{
			{Name48: dcgm.RetiredPending, Name410: "DCGM_FI_DEV_PAGE_RETIRED_PENDING", Type: dcgm.Counter,
				Help: "Total number of pages pending retirement."},
		}},
	{Field: FieldNVLinkCRCFlitErrors, Name: "nvlink_crc_flit_errors", Unit: dcgm.None,
		NVML: "field value `NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL`",
		DCGM: []dcgm.Field{
			{Name48: dcgm.NVLinkCRCFlitErrors, Name410: "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_TOTAL", Type: dcgm.Counter,
				Help: "Total number of NVLink flow-control CRC errors."},
		}},
	{Field: FieldNVLinkCRCDataErrors, Name: "nvlink_crc_data_errors", Unit: dcgm.None,
		NVML: "field value `NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL`",
		DCGM: []dcgm.Field{
			{Name48: dcgm.NVLinkCRCDataErrors, Name410: "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_TOTAL", Type: dcgm.Counter,
				Help: "Total number of NVLink data CRC errors."},
		}},
	{Field: FieldNVLinkReplayErrors, Name: "nvlink_replay_errors", Unit: dcgm.None,
		NVML: "field value `NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL`",
		DCGM: []dcgm.Field{
			{Name48: dcgm.NVLinkReplayErrors, Name410: "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_TOTAL", Type: dcgm.Counter,
				Help: "Total number of NVLink retries."},
		}},
	{Field: FieldNVLinkRecoveryErrors, Name: "nvlink_recovery_errors", Unit: dcgm.None,
		NVML: "field value `NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL`",
		DCGM: []dcgm.Field{
			{Name48: dcgm.NVLinkRecoveryErrs, Name410: "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_TOTAL", Type: dcgm.Counter,
				Help: "Total number of NVLink recovery errors."},
		}},
	{Field: FieldSMActive, Name: "sm_active", Unit: dcgm.Ratio,
		NVML: "GPM `SM_UTIL` / 100",
		Feed: &Feed{Signal: signal.GPUSMActive, Agg: Mean, Scale: 100},
		DCGM: []dcgm.Field{
			{Name48: dcgm.ProfSMActive, Name410: dcgm.ProfSMUtilRatio, Unit48: dcgm.Ratio, Unit410: dcgm.Ratio, Type: dcgm.Gauge,
				Help: "The ratio of cycles an SM has at least 1 warp assigned."},
		}},
	{Field: FieldSMOccupancy, Name: "sm_occupancy", Unit: dcgm.Ratio,
		NVML: "GPM `SM_OCCUPANCY` / 100",
		DCGM: []dcgm.Field{
			{Name48: dcgm.ProfSMOccupancy, Name410: "DCGM_FI_PROF_SM_OCCUPANCY_RATIO", Unit48: dcgm.Ratio, Unit410: dcgm.Ratio, Type: dcgm.Gauge,
				Help: "The ratio of number of warps resident on an SM."},
		}},
	{Field: FieldFP64Active, Name: "fp64_active", Unit: dcgm.Ratio,
		NVML: "GPM `FP64_UTIL` / 100",
		DCGM: []dcgm.Field{
			{Name48: dcgm.ProfFP64Active, Name410: "DCGM_FI_PROF_FP64_UTIL_RATIO", Unit48: dcgm.Ratio, Unit410: dcgm.Ratio, Type: dcgm.Gauge,
				Help: "Ratio of cycles the fp64 pipes are active."},
		}},
	{Field: FieldFP32Active, Name: "fp32_active", Unit: dcgm.Ratio,
		NVML: "GPM `FP32_UTIL` / 100",
		DCGM: []dcgm.Field{
			{Name48: dcgm.ProfFP32Active, Name410: "DCGM_FI_PROF_FP32_UTIL_RATIO", Unit48: dcgm.Ratio, Unit410: dcgm.Ratio, Type: dcgm.Gauge,
				Help: "Ratio of cycles the fp32 pipes are active."},
		}},
	{Field: FieldFP16Active, Name: "fp16_active", Unit: dcgm.Ratio,
		NVML: "GPM `FP16_UTIL` / 100",
		DCGM: []dcgm.Field{
			{Name48: dcgm.ProfFP16Active, Name410: "DCGM_FI_PROF_FP16_UTIL_RATIO", Unit48: dcgm.Ratio, Unit410: dcgm.Ratio, Type: dcgm.Gauge,
				Help: "Ratio of cycles the fp16 pipes are active."},
		}},
	{Field: FieldNVLinkTxBytes, Name: "nvlink_tx_bytes_per_s", Unit: dcgm.BytesPerSecond,
		NVML: "GPM `NVLINK_TOTAL_TX_PER_SEC`",
		DCGM: []dcgm.Field{
			{Name48: dcgm.ProfNVLinkTxBytes, Name49: dcgm.ProfNVLinkTxBytes, Name410: "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND", Unit48: dcgm.BytesPerSecond, Unit410: dcgm.BytesPerSecond, Type: dcgm.Gauge,
				Help: "The rate of data transmitted over NVLink, not including protocol headers, in bytes per second."},
		}},
	{Field: FieldNVLinkRxBytes, Name: "nvlink_rx_bytes_per_s", Unit: dcgm.BytesPerSecond,
		NVML: "GPM `NVLINK_TOTAL_RX_PER_SEC`",
		DCGM: []dcgm.Field{
			{Name48: dcgm.ProfNVLinkRxBytes, Name49: dcgm.ProfNVLinkRxBytes, Name410: "DCGM_FI_PROF_NVLINK_RX_BYTES_PER_SECOND", Unit48: dcgm.BytesPerSecond, Unit410: dcgm.BytesPerSecond, Type: dcgm.Gauge,
				Help: "The rate of data received over NVLink, not including protocol headers, in bytes per second."},
		}},
	// 4.8.4's opt-in power-limit and fabric-health fields.
	{Field: FieldPowerMgmtLimit, Name: "power_mgmt_limit_w", Unit: dcgm.Watts,
		NVML: "`nvmlDeviceGetPowerManagementLimit`, mW to W",
		DCGM: []dcgm.Field{
			{Name48: dcgm.PowerMgmtLimit, Name410: "DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS", Unit48: dcgm.Watts, Unit410: dcgm.Watts, Type: dcgm.Gauge,
				Help: "Configured power management limit (in %s)."},
		}},
	{Field: FieldPowerLimit, Name: "power_limit_w", Unit: dcgm.Watts,
		NVML: "`nvmlDeviceGetEnforcedPowerLimit`, mW to W",
		DCGM: []dcgm.Field{
			{Name48: dcgm.EnforcedPowerLimit, Name410: "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS", Unit48: dcgm.Watts, Unit410: dcgm.Watts, Type: dcgm.Gauge,
				Help: "Effective power limit the driver enforces (in %s)."},
		}},
	{Field: FieldFabricHealthSummary, Name: "fabric_health_summary", Unit: dcgm.None,
		NVML: "`nvmlDeviceGetGpuFabricInfoV` v3 health summary (NVSwitch fabrics)",
		DCGM: []dcgm.Field{
			{Name48: dcgm.FabricHealthSummary, Name410: dcgm.FabricHealthSummary, Type: dcgm.Gauge,
				Help: "GPU fabric health summary: 0 not supported, 1 healthy, 2 unhealthy, 3 limited capacity."},
		}},
	{Field: FieldFabricHealthMask, Name: "fabric_health_mask", Unit: dcgm.None,
		NVML: "`nvmlDeviceGetGpuFabricInfoV` v3 health mask",
		DCGM: []dcgm.Field{
			{Name48: dcgm.FabricHealthMask, Name410: dcgm.FabricHealthMask, Type: dcgm.Gauge,
				Help: "GPU fabric health mask (NVML_GPU_FABRIC_HEALTH_MASK_* bits)."},
		}},
	{Field: FieldRowRemapPending, Name: "row_remap_pending", Unit: dcgm.None,
		NVML: "`nvmlDeviceGetRemappedRows`, 1 until the GPU is reset",
		DCGM: []dcgm.Field{
			{Name48: dcgm.RowRemapPending, Name410: dcgm.RowRemapPending, Type: dcgm.Gauge,
				Help: "Whether rows are pending remapping (1) until the GPU is reset."},
		}},
	{Field: FieldPCIeTxThroughput, Name: "pcie_tx_kbps", Unit: dcgm.KBPerSecond,
		NVML: "`nvmlDeviceGetPcieThroughput(TX)`, KB/s over 20 ms",
		DCGM: []dcgm.Field{
			{Name48: dcgm.PCIeTxThroughput, Name410: dcgm.PCIeTxThroughput, Unit48: dcgm.KBPerSecond, Unit410: dcgm.KBPerSecond, Type: dcgm.Counter,
				Help: "PCIe TX throughput over the driver's last 20 ms sample (in %s), as dcgm-exporter serves it through NVML."},
		}},
	{Field: FieldPCIeRxThroughput, Name: "pcie_rx_kbps", Unit: dcgm.KBPerSecond,
		NVML: "`nvmlDeviceGetPcieThroughput(RX)`, KB/s over 20 ms",
		DCGM: []dcgm.Field{
			{Name48: dcgm.PCIeRxThroughput, Name410: dcgm.PCIeRxThroughput, Unit48: dcgm.KBPerSecond, Unit410: dcgm.KBPerSecond, Type: dcgm.Counter,
				Help: "PCIe RX throughput over the driver's last 20 ms sample (in %s), as dcgm-exporter serves it through NVML."},
		}},
}

// specs indexes Specs by field; names and dcgmFields are derived from it.
var (
	specs      [NumFields]*Spec
	names      [NumFields]string
	dcgmFields []*dcgm.Field
	dcgmSource = map[*dcgm.Field]Field{}
)

func init() {
	for i := range Specs {
		s := &Specs[i]
		if s.Field >= NumFields || specs[s.Field] != nil {
			panic(fmt.Sprintf("gpu: Specs has field %d twice or out of range", s.Field))
		}
		specs[s.Field], names[s.Field] = s, s.Name
		for j := range s.DCGM {
			dcgmFields = append(dcgmFields, &s.DCGM[j])
			dcgmSource[&s.DCGM[j]] = s.Field
		}
	}
}

// Spec returns the field's entry in Specs; nil for a field without one
// (TestSpecs fails on it).
func (f Field) Spec() *Spec {
	if f < NumFields {
		return specs[f]
	}
	return nil
}

// String returns the field's name as used in the exporter's JSON API.
func (f Field) String() string {
	if f < NumFields && names[f] != "" {
		return names[f]
	}
	return "unknown"
}

// ParseField returns the field String names.
func ParseField(name string) (Field, bool) {
	for f := range NumFields {
		if names[f] == name {
			return f, true
		}
	}
	return 0, false
}

// DCGMFields returns every dcgm-exporter field gpuscale serves, in both
// schemas, in the order of Specs. The caller must not modify them.
func DCGMFields() []*dcgm.Field { return dcgmFields }

// LookupDCGM returns the dcgm-exporter field named name in either schema,
// the schema whose name it is (Schema48 for a name both share), and the
// field that fills it.
func LookupDCGM(name string) (*dcgm.Field, dcgm.Schema, Field, bool) {
	if name == "" {
		return nil, 0, 0, false
	}
	for _, f := range dcgmFields {
		switch name {
		case f.Name48, f.Name49:
			return f, dcgm.Schema48, dcgmSource[f], true
		case f.Name410:
			return f, dcgm.Schema410, dcgmSource[f], true
		}
	}
	return nil, 0, 0, false
}
