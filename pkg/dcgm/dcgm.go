// Package dcgm names, once, the series and labels of NVIDIA's dcgm-exporter
// that gpuscale serves and reads: the exporter renders them, the adapter's
// ingest and its PromQL defaults read them. It holds names and help strings
// only, no code, so that readers of the series do not link the exporter.
package dcgm

// dcgm-exporter's label names.
const (
	LabelGPU           = "gpu"
	LabelUUID          = "UUID"
	LabelDevice        = "device"
	LabelModelName     = "modelName"
	LabelHostname      = "Hostname"
	LabelPCIBusID      = "pci_bus_id"
	LabelDriverVersion = "DCGM_FI_DRIVER_VERSION"
	LabelGPUIProfile   = "GPU_I_PROFILE"
	LabelGPUIID        = "GPU_I_ID"
	LabelNamespace     = "namespace"
	LabelPod           = "pod"
	LabelContainer     = "container"
)

// dcgm-exporter's field names, in the units dcgm-exporter serves them.
const (
	GPUUtil                   = "DCGM_FI_DEV_GPU_UTIL"
	MemCopyUtil               = "DCGM_FI_DEV_MEM_COPY_UTIL"
	EncUtil                   = "DCGM_FI_DEV_ENC_UTIL"
	DecUtil                   = "DCGM_FI_DEV_DEC_UTIL"
	FBUsed                    = "DCGM_FI_DEV_FB_USED"
	FBFree                    = "DCGM_FI_DEV_FB_FREE"
	FBReserved                = "DCGM_FI_DEV_FB_RESERVED"
	FBTotal                   = "DCGM_FI_DEV_FB_TOTAL"
	GPUTemp                   = "DCGM_FI_DEV_GPU_TEMP"
	MemoryTemp                = "DCGM_FI_DEV_MEMORY_TEMP"
	PowerUsage                = "DCGM_FI_DEV_POWER_USAGE"
	PowerMgmtLimit            = "DCGM_FI_DEV_POWER_MGMT_LIMIT"
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

	// The profiling fields (DCP in DCGM, GPM in NVML): activity ratios
	// from 0 to 1 and byte rates.
	ProfGREngineActive = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
	ProfSMActive       = "DCGM_FI_PROF_SM_ACTIVE"
	ProfSMOccupancy    = "DCGM_FI_PROF_SM_OCCUPANCY"
	ProfTensorActive   = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
	ProfDRAMActive     = "DCGM_FI_PROF_DRAM_ACTIVE"
	ProfPCIeTxBytes    = "DCGM_FI_PROF_PCIE_TX_BYTES"
	ProfPCIeRxBytes    = "DCGM_FI_PROF_PCIE_RX_BYTES"
	ProfNVLinkTxBytes  = "DCGM_FI_PROF_NVLINK_TX_BYTES"
	ProfNVLinkRxBytes  = "DCGM_FI_PROF_NVLINK_RX_BYTES"
)

// GPUShared is gpuscale's marker of a device whose GPU_UTIL and FB_USED
// series are per-pod shares that add up to the device's value, rather than
// dcgm-exporter's copies of it; readers that aggregate per device need it.
const GPUShared = "gpuscale_gpu_shared"

// Type is a series' Prometheus type.
type Type uint8

const (
	Gauge Type = iota
	Counter
)

// Metric is one field's name, type and help string.
type Metric struct {
	Name string
	Type Type
	Help string
}

// Metrics lists every field above with its help string. The help strings
// of dcgm-exporter's default fields say what dcgm-exporter's say.
var Metrics = []Metric{
	{GPUUtil, Gauge, "GPU utilization (in %)."},
	{MemCopyUtil, Gauge, "Memory utilization (in %)."},
	{EncUtil, Gauge, "Encoder utilization (in %)."},
	{DecUtil, Gauge, "Decoder utilization (in %)."},
	{FBUsed, Gauge, "Framebuffer memory used (in MiB)."},
	{FBFree, Gauge, "Framebuffer memory free (in MiB)."},
	{FBReserved, Gauge, "Framebuffer memory reserved by the driver (in MiB)."},
	{FBTotal, Gauge, "Total framebuffer memory (in MiB)."},
	{GPUTemp, Gauge, "GPU temperature (in C)."},
	{MemoryTemp, Gauge, "Memory temperature (in C)."},
	{PowerUsage, Gauge, "Power draw (in W)."},
	{PowerMgmtLimit, Gauge, "Enforced power limit (in W)."},
	{TotalEnergyConsumption, Counter, "Total energy consumption since boot (in mJ)."},
	{SMClock, Gauge, "SM clock frequency (in MHz)."},
	{MemClock, Gauge, "Memory clock frequency (in MHz)."},
	{XIDErrors, Gauge, "Value of the last XID error encountered."},
	{PCIeTxThroughput, Counter, "PCIe TX throughput over the driver's last 20 ms sample (in KB/s), as dcgm-exporter serves it through NVML."},
	{PCIeRxThroughput, Counter, "PCIe RX throughput over the driver's last 20 ms sample (in KB/s), as dcgm-exporter serves it through NVML."},
	{PCIeReplayCounter, Counter, "Total number of PCIe retries."},
	{NVLinkBandwidthTotal, Counter, "NVLink data transferred over every link since driver load, TX plus RX (in bytes)."},
	{CorrectableRemappedRows, Counter, "Number of remapped rows for correctable errors."},
	{UncorrectableRemappedRows, Counter, "Number of remapped rows for uncorrectable errors."},
	{RowRemapPending, Gauge, "Whether rows are pending remapping (1) until the GPU is reset."},
	{RowRemapFailure, Gauge, "Whether remapping of rows has failed (1)."},
	{VGPULicenseStatus, Gauge, "vGPU license status: 1 licensed, 0 not licensed."},
	{ProfGREngineActive, Gauge, "Ratio of time the graphics engine is active (0 to 1)."},
	{ProfSMActive, Gauge, "Ratio of cycles an SM has at least one warp assigned (0 to 1)."},
	{ProfSMOccupancy, Gauge, "Ratio of warps resident on an SM to the most it can hold (0 to 1)."},
	{ProfTensorActive, Gauge, "Ratio of cycles the tensor pipes are active (0 to 1)."},
	{ProfDRAMActive, Gauge, "Ratio of cycles the device memory interface is active (0 to 1)."},
	{ProfPCIeTxBytes, Gauge, "PCIe bytes transmitted per second, headers included."},
	{ProfPCIeRxBytes, Gauge, "PCIe bytes received per second, headers included."},
	{ProfNVLinkTxBytes, Gauge, "NVLink bytes transmitted per second over every link."},
	{ProfNVLinkRxBytes, Gauge, "NVLink bytes received per second over every link."},
}

// Lookup returns the named field's Metric.
func Lookup(name string) (Metric, bool) {
	for _, m := range Metrics {
		if m.Name == name {
			return m, true
		}
	}
	return Metric{}, false
}
