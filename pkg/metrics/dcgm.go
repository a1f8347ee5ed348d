// Package metrics defines, once, every metric name, help string and label
// gpuscale exports or serves, beside the code that fills them.
//
// The exporter's GPU series use NVIDIA dcgm-exporter's names, units and
// labels, so dashboards and alert rules written for dcgm-exporter keep
// working against gpuscale.
package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

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
	// LabelSimulated marks every series of the simulated backend.
	LabelSimulated = "simulated"
	// LabelXID carries the XID code of the per-code counter.
	LabelXID = "xid"
)

// deviceLabels identify a device; podLabels name the container holding it.
var (
	deviceLabels = []string{LabelGPU, LabelUUID, LabelPCIBusID, LabelDevice, LabelModelName,
		LabelGPUIProfile, LabelGPUIID, LabelHostname, LabelDriverVersion}
	podLabels = []string{LabelContainer, LabelNamespace, LabelPod}
)

// FieldMetric maps one gpu.Field onto its dcgm-exporter metric.
type FieldMetric struct {
	Field gpu.Field
	Name  string
	Help  string
	Type  prometheus.ValueType
}

// DCGMFields lists the GPU field metrics in exposition order. The names and
// units are dcgm-exporter's; FB_TOTAL and POWER_MGMT_LIMIT are DCGM fields
// outside its default set, exported because utilization-of-capacity signals
// need them.
var DCGMFields = []FieldMetric{
	{gpu.FieldGPUUtil, "DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", prometheus.GaugeValue},
	{gpu.FieldMemCopyUtil, "DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", prometheus.GaugeValue},
	{gpu.FieldFBUsed, "DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", prometheus.GaugeValue},
	{gpu.FieldFBFree, "DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", prometheus.GaugeValue},
	{gpu.FieldFBReserved, "DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved by the driver (in MiB).", prometheus.GaugeValue},
	{gpu.FieldFBTotal, "DCGM_FI_DEV_FB_TOTAL", "Total framebuffer memory (in MiB).", prometheus.GaugeValue},
	{gpu.FieldGPUTemp, "DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", prometheus.GaugeValue},
	{gpu.FieldMemoryTemp, "DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", prometheus.GaugeValue},
	{gpu.FieldPowerUsage, "DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", prometheus.GaugeValue},
	{gpu.FieldPowerLimit, "DCGM_FI_DEV_POWER_MGMT_LIMIT", "Enforced power limit (in W).", prometheus.GaugeValue},
	{gpu.FieldEnergy, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).", prometheus.CounterValue},
	{gpu.FieldSMClock, "DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", prometheus.GaugeValue},
	{gpu.FieldMemClock, "DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", prometheus.GaugeValue},
	{gpu.FieldLastXID, "DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", prometheus.GaugeValue},
}

// gpuscale's own GPU series, where dcgm-exporter's users lack a signal.
const (
	XIDErrorsTotalName = "gpuscale_gpu_xid_errors_total"
	GPUUpName          = "gpuscale_gpu_up"
)

// PodRef names a container that holds a device.
type PodRef struct{ Namespace, Pod, Container string }

// DeviceState is what the builder renders for one device.
type DeviceState struct {
	Reading gpu.Reading
	// Pods hold the device; one series set is rendered per pod (time-slicing
	// shares one GPU among several), or one with empty pod labels if none.
	Pods []PodRef
}

// GPUBuilder renders device states as Prometheus metrics. Descriptors are
// built once; a collection only fills values.
type GPUBuilder struct {
	hostname, driver string
	fields           [gpu.NumFields]*prometheus.Desc
	xidTotal, up     *prometheus.Desc
}

// NewGPUBuilder prepares the descriptors for a node. A simulated backend adds
// simulated="true" to every series, so simulated data can never pass for a
// real GPU's.
func NewGPUBuilder(hostname, driverVersion string, simulated bool) *GPUBuilder {
	var constLabels prometheus.Labels
	if simulated {
		constLabels = prometheus.Labels{LabelSimulated: "true"}
	}
	b := &GPUBuilder{hostname: hostname, driver: driverVersion}
	withPods := append(append([]string{}, deviceLabels...), podLabels...)
	for _, f := range DCGMFields {
		b.fields[f.Field] = prometheus.NewDesc(f.Name, f.Help, withPods, constLabels)
	}
	b.xidTotal = prometheus.NewDesc(XIDErrorsTotalName,
		"XID errors seen since the exporter started, by XID code.",
		append(append([]string{}, deviceLabels...), LabelXID), constLabels)
	b.up = prometheus.NewDesc(GPUUpName,
		"Whether the device was read successfully in the last collection (1) or not (0).",
		deviceLabels, constLabels)
	return b
}

// Build renders the states. It runs once per collection, never per scrape.
func (b *GPUBuilder) Build(states []DeviceState) []prometheus.Metric {
	out := make([]prometheus.Metric, 0, len(states)*(len(DCGMFields)+1))
	for i := range states {
		s := &states[i]
		dev := b.deviceLabelValues(s.Reading.Device)
		up := 1.0
		if !s.Reading.Healthy() {
			up = 0
		}
		out = append(out, prometheus.MustNewConstMetric(b.up, prometheus.GaugeValue, up, dev...))
		if !s.Reading.Healthy() {
			continue
		}
		pods := s.Pods
		if len(pods) == 0 {
			pods = []PodRef{{}}
		}
		for _, p := range pods {
			lv := append(append(make([]string, 0, len(dev)+3), dev...), p.Container, p.Namespace, p.Pod)
			for _, f := range DCGMFields {
				if v, ok := s.Reading.Get(f.Field); ok {
					out = append(out, prometheus.MustNewConstMetric(b.fields[f.Field], f.Type, v, lv...))
				}
			}
		}
		for code, n := range s.Reading.XIDCounts {
			lv := append(append(make([]string, 0, len(dev)+1), dev...), strconv.FormatUint(code, 10))
			out = append(out, prometheus.MustNewConstMetric(b.xidTotal, prometheus.CounterValue, float64(n), lv...))
		}
	}
	return out
}

func (b *GPUBuilder) deviceLabelValues(d gpu.Device) []string {
	profile, giID := "", ""
	if d.MIG != nil {
		profile, giID = d.MIG.Profile, strconv.Itoa(d.MIG.GPUInstanceID)
	}
	return []string{strconv.Itoa(d.Index), d.UUID, d.PCIBusID, "nvidia" + strconv.Itoa(d.Minor),
		d.ModelName, profile, giID, b.hostname, b.driver}
}
