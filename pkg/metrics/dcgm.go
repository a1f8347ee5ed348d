// Package metrics defines, once, every metric name, help string and label
// gpuscale exports or serves, beside the code that fills them.
//
// The exporter's GPU series use NVIDIA dcgm-exporter's names, units and
// labels, so dashboards and alert rules written for dcgm-exporter keep
// working against gpuscale.
package metrics

import (
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscale/gpuscale/pkg/dcgm"
	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// Labels of gpuscale's own, beside dcgm-exporter's (package dcgm).
const (
	// LabelSimulated marks every series of the simulated backend.
	LabelSimulated = "simulated"
	// LabelXID carries the XID code of the per-code counter.
	LabelXID = "xid"
)

// deviceLabels identify a device; podLabels name the container holding it.
var (
	deviceLabels = []string{dcgm.LabelGPU, dcgm.LabelUUID, dcgm.LabelPCIBusID, dcgm.LabelDevice, dcgm.LabelModelName,
		dcgm.LabelGPUIProfile, dcgm.LabelGPUIID, dcgm.LabelHostname, dcgm.LabelDriverVersion}
	podLabels = []string{dcgm.LabelContainer, dcgm.LabelNamespace, dcgm.LabelPod}
)

// FieldMetric maps one gpu.Field onto its dcgm-exporter metric.
type FieldMetric struct {
	Field gpu.Field
	Name  string
	Help  string
	Type  prometheus.ValueType
}

// fieldNames maps every gpu.Field onto its DCGM name, in exposition order.
// FB_TOTAL, FB_RESERVED, POWER_MGMT_LIMIT and ROW_REMAP_PENDING are DCGM
// fields outside dcgm-exporter's default set, exported because
// utilization-of-capacity signals and remap alerts need them.
var fieldNames = []struct {
	field gpu.Field
	name  string
}{
	{gpu.FieldGPUUtil, dcgm.GPUUtil},
	{gpu.FieldMemCopyUtil, dcgm.MemCopyUtil},
	{gpu.FieldEncUtil, dcgm.EncUtil},
	{gpu.FieldDecUtil, dcgm.DecUtil},
	{gpu.FieldFBUsed, dcgm.FBUsed},
	{gpu.FieldFBFree, dcgm.FBFree},
	{gpu.FieldFBReserved, dcgm.FBReserved},
	{gpu.FieldFBTotal, dcgm.FBTotal},
	{gpu.FieldGPUTemp, dcgm.GPUTemp},
	{gpu.FieldMemoryTemp, dcgm.MemoryTemp},
	{gpu.FieldPowerUsage, dcgm.PowerUsage},
	{gpu.FieldPowerLimit, dcgm.PowerMgmtLimit},
	{gpu.FieldEnergy, dcgm.TotalEnergyConsumption},
	{gpu.FieldSMClock, dcgm.SMClock},
	{gpu.FieldMemClock, dcgm.MemClock},
	{gpu.FieldLastXID, dcgm.XIDErrors},
	{gpu.FieldPCIeTxThroughput, dcgm.PCIeTxThroughput},
	{gpu.FieldPCIeRxThroughput, dcgm.PCIeRxThroughput},
	{gpu.FieldPCIeReplay, dcgm.PCIeReplayCounter},
	{gpu.FieldNVLinkBandwidth, dcgm.NVLinkBandwidthTotal},
	{gpu.FieldRemappedRowsCorrectable, dcgm.CorrectableRemappedRows},
	{gpu.FieldRemappedRowsUncorrectable, dcgm.UncorrectableRemappedRows},
	{gpu.FieldRowRemapPending, dcgm.RowRemapPending},
	{gpu.FieldRowRemapFailure, dcgm.RowRemapFailure},
	{gpu.FieldVGPULicensed, dcgm.VGPULicenseStatus},
	{gpu.FieldGREngineActive, dcgm.ProfGREngineActive},
	{gpu.FieldSMActive, dcgm.ProfSMActive},
	{gpu.FieldSMOccupancy, dcgm.ProfSMOccupancy},
	{gpu.FieldTensorActive, dcgm.ProfTensorActive},
	{gpu.FieldDRAMActive, dcgm.ProfDRAMActive},
	{gpu.FieldPCIeTxBytes, dcgm.ProfPCIeTxBytes},
	{gpu.FieldPCIeRxBytes, dcgm.ProfPCIeRxBytes},
	{gpu.FieldNVLinkTxBytes, dcgm.ProfNVLinkTxBytes},
	{gpu.FieldNVLinkRxBytes, dcgm.ProfNVLinkRxBytes},
}

// DCGMFields lists the GPU field metrics in exposition order, with the
// names, types and help strings of package dcgm.
var DCGMFields = func() []FieldMetric {
	out := make([]FieldMetric, 0, len(fieldNames))
	for _, f := range fieldNames {
		m, ok := dcgm.Lookup(f.name)
		if !ok {
			panic("metrics: " + f.name + " is not in package dcgm")
		}
		typ := prometheus.GaugeValue
		if m.Type == dcgm.Counter {
			typ = prometheus.CounterValue
		}
		out = append(out, FieldMetric{Field: f.field, Name: m.Name, Help: m.Help, Type: typ})
	}
	return out
}()

// gpuscale's own GPU series, where dcgm-exporter's users lack a signal.
const (
	XIDErrorsTotalName = "gpuscale_gpu_xid_errors_total"
	GPUUpName          = "gpuscale_gpu_up"
	GPUSharedName      = dcgm.GPUShared
)

// PodRef names a container that holds a device.
type PodRef struct{ Namespace, Pod, Container string }

// DeviceState is what the builder renders for one device.
type DeviceState struct {
	Reading gpu.Reading
	// Pods hold the device; one series set is rendered per pod (time-slicing
	// shares one GPU among several), or one with empty pod labels if none.
	Pods []PodRef
	// Shares, when set, replace Pods on a GPU that several pods share: each
	// pod's GPU_UTIL and FB_USED are its own processes', and the processes
	// that belong to no pod are the share with empty pod labels.
	Shares []Share
}

// Share is what one pod's processes use of a shared GPU.
type Share struct {
	Pod PodRef
	// Util is the percent of the GPU's time the pod's processes used; set
	// when HasUtil.
	Util    float64
	HasUtil bool
	// MemoryMiB is the framebuffer its processes hold; set when HasMemory.
	MemoryMiB float64
	HasMemory bool
}

// GPUBuilder renders device states as Prometheus metrics. Descriptors are
// built once; a collection only fills values.
type GPUBuilder struct {
	hostname, driver string
	fields           [gpu.NumFields]*prometheus.Desc
	xidTotal, up     *prometheus.Desc
	shared           *prometheus.Desc
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
	b.shared = prometheus.NewDesc(GPUSharedName,
		"1 when the device is shared by several pods and its DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_FB_USED series are each pod's own share (empty pod labels: processes in no pod), adding up to the device's; absent when they repeat the device's value.",
		deviceLabels, constLabels)
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
		if s.Shares != nil {
			out = b.buildShares(out, s, dev)
		} else {
			pods := s.Pods
			if len(pods) == 0 {
				pods = []PodRef{{}}
			}
			for _, p := range pods {
				out = b.buildFields(out, &s.Reading, dev, p, nil)
			}
		}
		out = b.buildXIDs(out, s.Reading.XIDCounts, dev)
	}
	return out
}

// buildFields renders a device's fields for one holder; share, when set,
// replaces its utilization and memory used.
func (b *GPUBuilder) buildFields(out []prometheus.Metric, r *gpu.Reading, dev []string, p PodRef, share *Share) []prometheus.Metric {
	lv := append(append(make([]string, 0, len(dev)+3), dev...), p.Container, p.Namespace, p.Pod)
	for _, f := range DCGMFields {
		v, ok := r.Get(f.Field)
		if share != nil && f.Field == gpu.FieldGPUUtil && share.HasUtil {
			v, ok = share.Util, ok || share.HasUtil
		}
		if share != nil && f.Field == gpu.FieldFBUsed && share.HasMemory {
			v, ok = share.MemoryMiB, ok || share.HasMemory
		}
		if ok {
			out = append(out, prometheus.MustNewConstMetric(b.fields[f.Field], f.Type, v, lv...))
		}
	}
	return out
}

// buildShares renders a shared GPU: one series set per share, and the
// marker that tells readers its GPU_UTIL series add up to the device's
// rather than repeat it.
func (b *GPUBuilder) buildShares(out []prometheus.Metric, s *DeviceState, dev []string) []prometheus.Metric {
	for i := range s.Shares {
		if s.Shares[i].HasUtil {
			out = append(out, prometheus.MustNewConstMetric(b.shared, prometheus.GaugeValue, 1, dev...))
			break
		}
	}
	for i := range s.Shares {
		out = b.buildFields(out, &s.Reading, dev, s.Shares[i].Pod, &s.Shares[i])
	}
	return out
}

// buildXIDs renders the per-code XID counters of a watched device, with
// the fatal codes at 0 until seen so that increase() sees the first one.
func (b *GPUBuilder) buildXIDs(out []prometheus.Metric, counts map[uint64]uint64, dev []string) []prometheus.Metric {
	if counts == nil {
		return out
	}
	emit := func(code, n uint64) {
		lv := append(append(make([]string, 0, len(dev)+1), dev...), strconv.FormatUint(code, 10))
		out = append(out, prometheus.MustNewConstMetric(b.xidTotal, prometheus.CounterValue, float64(n), lv...))
	}
	for _, code := range gpu.FatalXIDs {
		emit(code, counts[code])
	}
	for code, n := range counts {
		if !slices.Contains(gpu.FatalXIDs, code) {
			emit(code, n)
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
