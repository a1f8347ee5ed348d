package dcgm

// The 4.8 names, as the exporter and the readers name them in code.
const (
	GPUUtil                   = "DCGM_FI_DEV_GPU_UTIL"
	MemCopyUtil               = "DCGM_FI_DEV_MEM_COPY_UTIL"
	EncUtil                   = "DCGM_FI_DEV_ENC_UTIL"
	DecUtil                   = "DCGM_FI_DEV_DEC_UTIL"
	FBUsed                    = "DCGM_FI_DEV_FB_USED"
	FBFree                    = "DCGM_FI_DEV_FB_FREE"
	FBReserved                = "DCGM_FI_DEV_FB_RESERVED"
	FBTotal                   = "DCGM_FI_DEV_FB_TOTAL"
	FBCapacityBytes           = "DCGM_FI_DEV_FB_CAPACITY_BYTES"
	GPUTemp                   = "DCGM_FI_DEV_GPU_TEMP"
	MemoryTemp                = "DCGM_FI_DEV_MEMORY_TEMP"
	PowerUsage                = "DCGM_FI_DEV_POWER_USAGE"
	PowerMgmtLimit            = "DCGM_FI_DEV_POWER_MGMT_LIMIT"
	EnforcedPowerLimit        = "DCGM_FI_DEV_ENFORCED_POWER_LIMIT"
	TotalEnergyConsumption    = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
	SMClock                   = "DCGM_FI_DEV_SM_CLOCK"
	MemClock                  = "DCGM_FI_DEV_MEM_CLOCK"
	XIDErrors                 = "DCGM_FI_DEV_XID_ERRORS"
	PCIeTxThroughput          = "DCGM_FI_DEV_PCIE_TX_THROUGHPUT"
	PCIeRxThroughput          = "DCGM_FI_DEV_PCIE_RX_THROUGHPUT"
	PCIeReplayCounter         = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
	NVLinkBandwidthTotal      = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"
	CorrectableRemappedRows   = "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"
	UncorrectableRemappedRows = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
	RowRemapPending           = "DCGM_FI_DEV_ROW_REMAP_PENDING"
	RowRemapFailure           = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
	VGPULicenseStatus         = "DCGM_FI_DEV_VGPU_LICENSE_STATUS"

	ECCSBEVolTotal = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"
	ECCDBEVolTotal = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
	ECCSBEAggTotal = "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"
	ECCDBEAggTotal = "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"
	RetiredSBE     = "DCGM_FI_DEV_RETIRED_SBE"
	RetiredDBE     = "DCGM_FI_DEV_RETIRED_DBE"
	RetiredPending = "DCGM_FI_DEV_RETIRED_PENDING"

	PowerViolation       = "DCGM_FI_DEV_POWER_VIOLATION"
	ThermalViolation     = "DCGM_FI_DEV_THERMAL_VIOLATION"
	SyncBoostViolation   = "DCGM_FI_DEV_SYNC_BOOST_VIOLATION"
	BoardLimitViolation  = "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION"
	LowUtilViolation     = "DCGM_FI_DEV_LOW_UTIL_VIOLATION"
	ReliabilityViolation = "DCGM_FI_DEV_RELIABILITY_VIOLATION"

	NVLinkCRCFlitErrors = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
	NVLinkCRCDataErrors = "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL"
	NVLinkReplayErrors  = "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"
	NVLinkRecoveryErrs  = "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"

	FabricHealthSummary = "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY"
	FabricHealthMask    = "DCGM_FI_DEV_FABRIC_HEALTH_MASK"

	// The profiling fields (DCP in DCGM, GPM in NVML): activity ratios
	// from 0 to 1 and byte rates.
	ProfGREngineActive = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
	ProfSMActive       = "DCGM_FI_PROF_SM_ACTIVE"
	ProfSMOccupancy    = "DCGM_FI_PROF_SM_OCCUPANCY"
	ProfTensorActive   = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
	ProfDRAMActive     = "DCGM_FI_PROF_DRAM_ACTIVE"
	ProfFP64Active     = "DCGM_FI_PROF_PIPE_FP64_ACTIVE"
	ProfFP32Active     = "DCGM_FI_PROF_PIPE_FP32_ACTIVE"
	ProfFP16Active     = "DCGM_FI_PROF_PIPE_FP16_ACTIVE"
	ProfPCIeTxBytes    = "DCGM_FI_PROF_PCIE_TX_BYTES"
	ProfPCIeRxBytes    = "DCGM_FI_PROF_PCIE_RX_BYTES"
	ProfNVLinkTxBytes  = "DCGM_FI_PROF_NVLINK_TX_BYTES"
	ProfNVLinkRxBytes  = "DCGM_FI_PROF_NVLINK_RX_BYTES"
)

// The 4.10 names of the fields the adapter reads.
const (
	GPUUtilRatio       = "DCGM_FI_DEV_GPU_UTIL_RATIO"
	FBUsedBytes        = "DCGM_FI_DEV_FB_USED_BYTES"
	FBFreeBytes        = "DCGM_FI_DEV_FB_FREE_BYTES"
	FBReservedBytes    = "DCGM_FI_DEV_FB_RESERVED_BYTES"
	BoardPowerWatts    = "DCGM_FI_DEV_BOARD_POWER_WATTS"
	ProfSMUtilRatio    = "DCGM_FI_PROF_SM_UTIL_RATIO"
	ProfTensorUtilRate = "DCGM_FI_PROF_TENSOR_UTIL_RATIO"
)

// Fields lists every field gpuscale serves or documents, in both schemas.
//
// Sources: the 4.8 names, types and help strings are dcgm-exporter's
// etc/default-counters.csv up to 4.8.4 and, for the power-limit and fabric
// fields, 4.8.4's release notes. The 4.10 names are the DCGM field names
// dcgm-exporter 4.9 renamed to: where the rename kept the unit, the name
// DCGM's own header gives the deprecated one (dcgm_fields.h, "renamed per
// DCGM Field Naming Standard"); where the unit changed (the eleven fields
// 4.9's notes list: clocks, energy, utilization, framebuffer, NVLink) the
// name DCGM's naming standard (dcgm_field_naming.py: subsystem, property,
// unit, RATIO or TOTAL suffix) gives it, beside DCGM 4.7's BAR1_*_BYTES;
// the four profiling rates are 4.10's release notes'. docs/dcgm-compatibility.md
// marks which is which.
var Fields = []Field{
	// dcgm-exporter's default collector.
	{Name48: SMClock, Name410: "DCGM_FI_DEV_SM_CLOCK_HERTZ", Unit48: MHz, Unit410: Hz, Type: Gauge,
		Help: "SM clock frequency (in %s).", Default48: true, Default410: true},
	{Name48: MemClock, Name410: "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", Unit48: MHz, Unit410: Hz, Type: Gauge,
		Help: "Memory clock frequency (in %s).", Default48: true, Default410: true},
	{Name48: MemoryTemp, Name410: "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", Unit48: Celsius, Unit410: Celsius, Type: Gauge,
		Help: "Memory temperature (in %s).", Default48: true, Default410: true},
	{Name48: GPUTemp, Name410: "DCGM_FI_DEV_GPU_TEMP_CELSIUS", Unit48: Celsius, Unit410: Celsius, Type: Gauge,
		Help: "GPU temperature (in %s).", Default48: true, Default410: true},
	{Name48: PowerUsage, Name410: BoardPowerWatts, Unit48: Watts, Unit410: Watts, Type: Gauge,
		Help: "Power draw (in %s).", Default48: true, Default410: true},
	{Name48: TotalEnergyConsumption, Name410: "DCGM_FI_DEV_BOARD_ENERGY_JOULES_TOTAL", Unit48: Millijoules, Unit410: Joules, Type: Counter,
		Help: "Total energy consumption since boot (in %s).", Default48: true, Default410: true},
	{Name48: PCIeReplayCounter, Name410: "DCGM_FI_DEV_PCIE_REPLAY_TOTAL", Type: Counter,
		Help: "Total number of PCIe retries.", Default48: true, Default410: true},
	{Name48: GPUUtil, Name410: GPUUtilRatio, Unit48: Percent, Unit410: Ratio, Type: Gauge,
		Help: "GPU utilization (in %s).", Default48: true, Default410: true},
	{Name48: MemCopyUtil, Name410: "DCGM_FI_DEV_MEMORY_COPY_UTIL_RATIO", Unit48: Percent, Unit410: Ratio, Type: Gauge,
		Help: "Memory utilization (in %s).", Default48: true, Default410: true},
	{Name48: EncUtil, Name410: "DCGM_FI_DEV_ENC_UTIL_RATIO", Unit48: Percent, Unit410: Ratio, Type: Gauge,
		Help: "Encoder utilization (in %s).", Default48: true, Default410: true},
	{Name48: DecUtil, Name410: "DCGM_FI_DEV_DEC_UTIL_RATIO", Unit48: Percent, Unit410: Ratio, Type: Gauge,
		Help: "Decoder utilization (in %s).", Default48: true, Default410: true},
	{Name48: XIDErrors, Name410: "DCGM_FI_DEV_XID_ERROR", Type: Gauge,
		Help: "Value of the last XID error encountered.", Default48: true, Default410: true},
	{Name48: FBFree, Name410: FBFreeBytes, Unit48: MiB, Unit410: Bytes, Type: Gauge,
		Help: "Framebuffer memory free (in %s).", Default48: true, Default410: true},
	{Name48: FBUsed, Name410: FBUsedBytes, Unit48: MiB, Unit410: Bytes, Type: Gauge,
		Help: "Framebuffer memory used (in %s).", Default48: true, Default410: true},
	{Name48: FBReserved, Name410: FBReservedBytes, Unit48: MiB, Unit410: Bytes, Type: Gauge,
		Help: "Framebuffer memory reserved (in %s).", Default48: true, Default410: true},
	{Name48: FBCapacityBytes, Name410: FBCapacityBytes, Unit48: Bytes, Unit410: Bytes, Type: Gauge,
		Help: "Total GPU memory (in %s).", Default410: true},
	{Name48: NVLinkBandwidthTotal, Name410: "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL", Unit48: MBPerSecond, Unit410: BytesPerSecond, Type: Counter,
		Help: "NVLink throughput over every link, TX plus RX (in %s).", Default48: true, Default410: true},
	{Name48: VGPULicenseStatus, Name410: VGPULicenseStatus, Type: Gauge,
		Help: "vGPU License status", Default48: true, Default410: true},
	{Name48: UncorrectableRemappedRows, Name410: "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", Type: Counter,
		Help: "Number of remapped rows for uncorrectable errors", Default48: true, Default410: true},
	{Name48: CorrectableRemappedRows, Name410: "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL", Type: Counter,
		Help: "Number of remapped rows for correctable errors", Default48: true, Default410: true},
	{Name48: RowRemapFailure, Name410: "DCGM_FI_DEV_ROW_REMAP_FAILED", Type: Gauge,
		Help: "Whether remapping of rows has failed", Default48: true, Default410: true},
	{Name48: ProfGREngineActive, Name410: "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", Unit48: Ratio, Unit410: Ratio, Type: Gauge,
		Help: "Ratio of time the graphics engine is active.", Default48: true, Default410: true},
	{Name48: ProfTensorActive, Name410: ProfTensorUtilRate, Unit48: Ratio, Unit410: Ratio, Type: Gauge,
		Help: "Ratio of cycles the tensor (HMMA) pipe is active.", Default48: true, Default410: true},
	{Name48: ProfDRAMActive, Name410: "DCGM_FI_PROF_DRAM_UTIL_RATIO", Unit48: Ratio, Unit410: Ratio, Type: Gauge,
		Help: "Ratio of cycles the device memory interface is active sending or receiving data.", Default48: true, Default410: true},
	{Name48: ProfPCIeTxBytes, Name49: ProfPCIeTxBytes, Name410: "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND", Unit48: BytesPerSecond, Unit410: BytesPerSecond, Type: Gauge,
		Help: "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", Default48: true, Default410: true},
	{Name48: ProfPCIeRxBytes, Name49: ProfPCIeRxBytes, Name410: "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND", Unit48: BytesPerSecond, Unit410: BytesPerSecond, Type: Gauge,
		Help: "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", Default48: true, Default410: true},

	// The collector's commented rows (opt-in in dcgm-exporter), served.
	{Name48: PowerViolation, Name410: PowerViolation, Unit48: Nanoseconds, Unit410: Nanoseconds, Type: Counter,
		Help: "Throttling duration due to power constraints (in %s)."},
	{Name48: ThermalViolation, Name410: ThermalViolation, Unit48: Nanoseconds, Unit410: Nanoseconds, Type: Counter,
		Help: "Throttling duration due to thermal constraints (in %s)."},
	{Name48: SyncBoostViolation, Name410: SyncBoostViolation, Unit48: Nanoseconds, Unit410: Nanoseconds, Type: Counter,
		Help: "Throttling duration due to sync-boost constraints (in %s)."},
	{Name48: BoardLimitViolation, Name410: BoardLimitViolation, Unit48: Nanoseconds, Unit410: Nanoseconds, Type: Counter,
		Help: "Throttling duration due to board limit constraints (in %s)."},
	{Name48: LowUtilViolation, Name410: LowUtilViolation, Unit48: Nanoseconds, Unit410: Nanoseconds, Type: Counter,
		Help: "Throttling duration due to low utilization (in %s)."},
	{Name48: ReliabilityViolation, Name410: ReliabilityViolation, Unit48: Nanoseconds, Unit410: Nanoseconds, Type: Counter,
		Help: "Throttling duration due to reliability constraints (in %s)."},
	{Name48: ECCSBEVolTotal, Name410: ECCSBEVolTotal, Type: Counter, Help: "Total number of single-bit volatile ECC errors."},
	{Name48: ECCDBEVolTotal, Name410: ECCDBEVolTotal, Type: Counter, Help: "Total number of double-bit volatile ECC errors."},
	{Name48: ECCSBEAggTotal, Name410: ECCSBEAggTotal, Type: Counter, Help: "Total number of single-bit persistent ECC errors."},
	{Name48: ECCDBEAggTotal, Name410: ECCDBEAggTotal, Type: Counter, Help: "Total number of double-bit persistent ECC errors."},
	{Name48: RetiredSBE, Name410: "DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL", Type: Counter,
		Help: "Total number of retired pages due to single-bit errors."},
	{Name48: RetiredDBE, Name410: "DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL", Type: Counter,
		Help: "Total number of retired pages due to double-bit errors."},
	{Name48: RetiredPending, Name410: "DCGM_FI_DEV_PAGE_RETIRED_PENDING", Type: Counter,
		Help: "Total number of pages pending retirement."},
	{Name48: NVLinkCRCFlitErrors, Name410: "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_TOTAL", Type: Counter,
		Help: "Total number of NVLink flow-control CRC errors."},
	{Name48: NVLinkCRCDataErrors, Name410: "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_TOTAL", Type: Counter,
		Help: "Total number of NVLink data CRC errors."},
	{Name48: NVLinkReplayErrors, Name410: "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_TOTAL", Type: Counter,
		Help: "Total number of NVLink retries."},
	{Name48: NVLinkRecoveryErrs, Name410: "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_TOTAL", Type: Counter,
		Help: "Total number of NVLink recovery errors."},
	{Name48: ProfSMActive, Name410: ProfSMUtilRatio, Unit48: Ratio, Unit410: Ratio, Type: Gauge,
		Help: "The ratio of cycles an SM has at least 1 warp assigned."},
	{Name48: ProfSMOccupancy, Name410: "DCGM_FI_PROF_SM_OCCUPANCY_RATIO", Unit48: Ratio, Unit410: Ratio, Type: Gauge,
		Help: "The ratio of number of warps resident on an SM."},
	{Name48: ProfFP64Active, Name410: "DCGM_FI_PROF_FP64_UTIL_RATIO", Unit48: Ratio, Unit410: Ratio, Type: Gauge,
		Help: "Ratio of cycles the fp64 pipes are active."},
	{Name48: ProfFP32Active, Name410: "DCGM_FI_PROF_FP32_UTIL_RATIO", Unit48: Ratio, Unit410: Ratio, Type: Gauge,
		Help: "Ratio of cycles the fp32 pipes are active."},
	{Name48: ProfFP16Active, Name410: "DCGM_FI_PROF_FP16_UTIL_RATIO", Unit48: Ratio, Unit410: Ratio, Type: Gauge,
		Help: "Ratio of cycles the fp16 pipes are active."},
	{Name48: ProfNVLinkTxBytes, Name49: ProfNVLinkTxBytes, Name410: "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND", Unit48: BytesPerSecond, Unit410: BytesPerSecond, Type: Gauge,
		Help: "The rate of data transmitted over NVLink, not including protocol headers, in bytes per second."},
	{Name48: ProfNVLinkRxBytes, Name49: ProfNVLinkRxBytes, Name410: "DCGM_FI_PROF_NVLINK_RX_BYTES_PER_SECOND", Unit48: BytesPerSecond, Unit410: BytesPerSecond, Type: Gauge,
		Help: "The rate of data received over NVLink, not including protocol headers, in bytes per second."},
	// 4.8.4's opt-in power-limit and fabric-health fields.
	{Name48: PowerMgmtLimit, Name410: "DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS", Unit48: Watts, Unit410: Watts, Type: Gauge,
		Help: "Configured power management limit (in %s)."},
	{Name48: EnforcedPowerLimit, Name410: "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS", Unit48: Watts, Unit410: Watts, Type: Gauge,
		Help: "Effective power limit the driver enforces (in %s)."},
	{Name48: FabricHealthSummary, Name410: FabricHealthSummary, Type: Gauge,
		Help: "GPU fabric health summary: 0 not supported, 1 healthy, 2 unhealthy, 3 limited capacity."},
	{Name48: FabricHealthMask, Name410: FabricHealthMask, Type: Gauge,
		Help: "GPU fabric health mask (NVML_GPU_FABRIC_HEALTH_MASK_* bits)."},

	// Beyond dcgm-exporter's collector files: DCGM fields gpuscale serves
	// because utilization-of-capacity signals and remap alerts need them.
	{Name48: FBTotal, Unit48: MiB, Type: Gauge, Help: "Total framebuffer memory (in %s)."},
	{Name48: RowRemapPending, Name410: RowRemapPending, Type: Gauge,
		Help: "Whether rows are pending remapping (1) until the GPU is reset."},
	{Name48: PCIeTxThroughput, Name410: PCIeTxThroughput, Unit48: KBPerSecond, Unit410: KBPerSecond, Type: Counter,
		Help: "PCIe TX throughput over the driver's last 20 ms sample (in %s), as dcgm-exporter serves it through NVML."},
	{Name48: PCIeRxThroughput, Name410: PCIeRxThroughput, Unit48: KBPerSecond, Unit410: KBPerSecond, Type: Counter,
		Help: "PCIe RX throughput over the driver's last 20 ms sample (in %s), as dcgm-exporter serves it through NVML."},
}

// Lookup returns the field named name in either schema, and the schema
// whose name it is (Schema48 for a name both share).
func Lookup(name string) (*Field, Schema, bool) {
	if name == "" {
		return nil, 0, false
	}
	for i := range Fields {
		f := &Fields[i]
		switch name {
		case f.Name48, f.Name49:
			return f, Schema48, true
		case f.Name410:
			return f, Schema410, true
		}
	}
	return nil, 0, false
}

// Unserved are fields and labels of dcgm-exporter's collector files that
// NVML cannot give gpuscale, or that gpuscale leaves out, with why. The
// compatibility table (docs/dcgm-compatibility.md) lists them.
var Unserved = []struct {
	Name48, Name410 string
	Default48       bool
	Why             string
}{
	{"DCGM_EXP_CLOCK_EVENTS_COUNT", "DCGM_EXP_CLOCK_EVENTS_COUNT", false,
		"counts DCGM's clock-event samples in a window; NVML gives only the current event reasons, so a count would miss every event between collections. The *_VIOLATION counters are the NVML measure of throttling"},
	{"DCGM_EXP_GPU_HEALTH_STATUS", "DCGM_EXP_GPU_HEALTH_STATUS", false,
		"DCGM's health watches (dcgmHealthCheck) have no NVML equivalent; gpuscale_gpu_up, the XID counters and the ECC, remap and NVLink error fields cover what NVML can tell"},
	{"DCGM_EXP_P2P_STATUS", "DCGM_EXP_P2P_STATUS", false,
		"one status per pair of GPUs from DCGM's topology; not implemented"},
	{"DCGM_FI_DEV_NVLINK_BANDWIDTH_L0", "DCGM_FI_DEV_NVLINK_THROUGHPUT_L0", false,
		"per-link series; gpuscale serves the total over every link"},
	{"DCGM_FI_NVML_VERSION", "DCGM_FI_SYSTEM_NVML_VERSION", false, "opt-in label row; not served, to keep every series' labels fixed"},
	{"DCGM_FI_DEV_BRAND", "DCGM_FI_DEV_GPU_BRAND", false, "opt-in label row; not served, to keep every series' labels fixed"},
	{"DCGM_FI_DEV_SERIAL", "DCGM_FI_DEV_BOARD_SERIAL", false, "opt-in label row; not served, to keep every series' labels fixed"},
	{"DCGM_FI_DEV_OEM_INFOROM_VER", "DCGM_FI_DEV_INFOROM_OEM_VERSION", false, "opt-in label row; not served, to keep every series' labels fixed"},
	{"DCGM_FI_DEV_ECC_INFOROM_VER", "DCGM_FI_DEV_INFOROM_ECC_VERSION", false, "opt-in label row; not served, to keep every series' labels fixed"},
	{"DCGM_FI_DEV_POWER_INFOROM_VER", "DCGM_FI_DEV_INFOROM_POWER_VERSION", false, "opt-in label row; not served, to keep every series' labels fixed"},
	{"DCGM_FI_DEV_INFOROM_IMAGE_VER", "DCGM_FI_DEV_INFOROM_IMAGE_VERSION", false, "opt-in label row; not served, to keep every series' labels fixed"},
	{"DCGM_FI_DEV_VBIOS_VERSION", "DCGM_FI_DEV_VBIOS_VERSION", false, "opt-in label row; not served, to keep every series' labels fixed"},
}
