package dcgm

// The 4.8 names, as the exporter and the readers name them in code. The
// fields themselves are gpu.Specs' entries; a name needs a constant here
// only where code names it.
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
