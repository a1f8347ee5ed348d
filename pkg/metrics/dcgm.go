// Package metrics defines, once, every metric name, help string and label
// gpuscale exports or serves, beside the code that fills them.
//
// The exporter's GPU series use NVIDIA dcgm-exporter's names, units and
// labels, in either of its naming schemas (pkg/gpu/dcgm), so dashboards and
// alert rules written for dcgm-exporter keep working against gpuscale.
package metrics

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/gpu/dcgm"
)

// Labels of gpuscale's own, beside dcgm-exporter's (package dcgm).
const (
	// LabelSimulated marks every series of the simulated backend.
	LabelSimulated = "simulated"
	// LabelXID carries the XID code of the per-code counter.
	LabelXID = dcgm.LabelXID
)

// FieldMetric is one dcgm-exporter field a gpu.Field fills in a schema.
type FieldMetric struct {
	Field gpu.Field
	DCGM  *dcgm.Field
	Name  string
	Help  string
	Type  dto.MetricType
	// scale converts the gpu.Field's value to the series' unit.
	scale float64
}

// DCGMFields returns the GPU field metrics a schema serves, in exposition
// order (by name): every dcgm-exporter field of gpu.Specs that the schema
// names.
func DCGMFields(s dcgm.Schema) []FieldMetric {
	var out []FieldMetric
	for i := range gpu.Specs {
		spec := &gpu.Specs[i]
		for j := range spec.DCGM {
			f := &spec.DCGM[j]
			name := f.Name(s)
			if name == "" {
				continue // no such series in this schema
			}
			k, ok := dcgm.Scale(spec.Unit, f.Unit(s))
			if !ok {
				panic("metrics: " + spec.Name + " cannot fill " + name)
			}
			typ := dto.MetricType_GAUGE
			if f.Type == dcgm.Counter {
				typ = dto.MetricType_COUNTER
			}
			out = append(out, FieldMetric{Field: spec.Field, DCGM: f, Name: name, Help: f.HelpText(s), Type: typ, scale: k})
		}
	}
	slices.SortFunc(out, func(a, b FieldMetric) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// gpuscale's own GPU series, where dcgm-exporter's users lack a signal.
const (
	XIDErrorsTotalName = "gpuscale_gpu_xid_errors_total"
	GPUUpName          = "gpuscale_gpu_up"
	GPUSharedName      = dcgm.GPUShared
	XIDErrorsCountName = dcgm.XIDErrorsCount
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
	// XIDWindow counts the device's XID errors by code within the XID
	// count window (Options.XIDCountWindow); nil when its XIDs are not
	// watched.
	XIDWindow map[uint64]uint64
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

// PodMeta is what the API server says of a pod beyond the kubelet's name:
// its UID and its labels, already sanitized to Prometheus label names,
// sorted by name, and cleared of names the exporter's series already use.
type PodMeta struct {
	UID    string
	Labels []Label
}

// Label is one label pair.
type Label struct{ Name, Value string }

// PodMetadata looks pods up for Options.PodUID and Options.PodLabels. It
// must answer from memory.
type PodMetadata interface {
	PodMeta(namespace, pod string) (PodMeta, bool)
}

// Options configure a GPUBuilder.
type Options struct {
	// Schema is the naming schema served; Schema48 when zero.
	Schema dcgm.Schema
	// Hostname and DriverVersion are the node's labels.
	Hostname, DriverVersion string
	// Simulated adds simulated="true" to every series, so simulated data
	// can never pass for a real GPU's.
	Simulated bool
	// Selection is the fields served; every field when nil.
	Selection *Selection
	// XIDCountWindow is DCGM_EXP_XID_ERRORS_COUNT's window: its
	// window_size_in_ms label. The series is served when the selection
	// has it and the window is positive.
	XIDCountWindow time.Duration
	// PodUID and PodLabels add each holder pod's UID (pod_uid) and labels
	// from Build's PodMetadata, as dcgm-exporter's
	// --kubernetes-enable-pod-uid and --kubernetes-enable-pod-labels do.
	PodUID, PodLabels bool
}

// GPUBuilder renders device states as metric families. Names, help
// strings and label names are fixed at construction; a collection only
// fills values.
type GPUBuilder struct {
	o      Options
	fields []FieldMetric
	// xidCount says DCGM_EXP_XID_ERRORS_COUNT is served, with window as
	// its window_size_in_ms.
	xidCount bool
	window   string
	// reserved are the label names pod labels may not take.
	reserved map[string]bool
}

// NewGPUBuilder prepares a node's builder.
func NewGPUBuilder(o Options) *GPUBuilder {
	if o.Schema == 0 {
		o.Schema = dcgm.Schema48
	}
	b := &GPUBuilder{o: o, reserved: map[string]bool{}}
	for _, f := range DCGMFields(o.Schema) {
		if o.Selection.has(f.DCGM) {
			b.fields = append(b.fields, f)
		}
	}
	b.xidCount = o.XIDCountWindow > 0 && o.Selection.hasXIDCount()
	b.window = strconv.FormatInt(o.XIDCountWindow.Milliseconds(), 10)
	for _, l := range b.deviceLabelNames() {
		b.reserved[l] = true
	}
	for _, l := range []string{dcgm.LabelContainer, dcgm.LabelNamespace, dcgm.LabelPod, dcgm.LabelPodUID,
		LabelXID, dcgm.LabelWindowSize, "__name__", "le", "quantile", "job", "instance"} {
		b.reserved[l] = true
	}
	return b
}

// Schema returns the schema the builder serves.
func (b *GPUBuilder) Schema() dcgm.Schema { return b.o.Schema }

// Fields returns the field metrics the builder serves.
func (b *GPUBuilder) Fields() []FieldMetric { return b.fields }

// ReservedLabel reports whether name is a label of the exporter's series,
// which a pod label must not take.
func (b *GPUBuilder) ReservedLabel(name string) bool { return b.reserved[name] }

// deviceLabelNames are the device labels, in the order deviceLabels fills
// them (sorted afterwards).
func (b *GPUBuilder) deviceLabelNames() []string {
	names := []string{dcgm.LabelGPU, dcgm.LabelUUID, dcgm.LabelPCIBusID, dcgm.LabelDevice, dcgm.LabelModelName,
		dcgm.LabelGPUIProfile, dcgm.LabelGPUIID, b.o.Schema.DriverVersionLabel()}
	names = append(names, b.o.Schema.HostnameLabels()...)
	if b.o.Simulated {
		names = append(names, LabelSimulated)
	}
	return names
}

// deviceLabels returns a device's label pairs, sorted by name. The pairs
// are shared, read-only, by every series of the device.
func (b *GPUBuilder) deviceLabels(d gpu.Device) []*dto.LabelPair {
	profile, giID := "", ""
	if d.MIG != nil {
		profile, giID = d.MIG.Profile, strconv.Itoa(d.MIG.GPUInstanceID)
	}
	values := []string{strconv.Itoa(d.Index), d.UUID, d.PCIBusID, "nvidia" + strconv.Itoa(d.Minor), d.ModelName,
		profile, giID, b.o.DriverVersion}
	for range b.o.Schema.HostnameLabels() {
		values = append(values, b.o.Hostname)
	}
	if b.o.Simulated {
		values = append(values, "true")
	}
	names := b.deviceLabelNames()
	out := make([]*dto.LabelPair, len(names))
	for i, n := range names {
		out[i] = &dto.LabelPair{Name: proto.String(n), Value: proto.String(values[i])}
	}
	sortLabels(out)
	return out
}

func sortLabels(ls []*dto.LabelPair) {
	slices.SortFunc(ls, func(a, c *dto.LabelPair) int { return cmp.Compare(a.GetName(), c.GetName()) })
}

// withPod returns the device's labels plus a holder's, sorted.
func (b *GPUBuilder) withPod(dev []*dto.LabelPair, p PodRef, meta PodMetadata) []*dto.LabelPair {
	out := make([]*dto.LabelPair, 0, len(dev)+4)
	out = append(out, dev...)
	out = append(out,
		&dto.LabelPair{Name: proto.String(dcgm.LabelContainer), Value: proto.String(p.Container)},
		&dto.LabelPair{Name: proto.String(dcgm.LabelNamespace), Value: proto.String(p.Namespace)},
		&dto.LabelPair{Name: proto.String(dcgm.LabelPod), Value: proto.String(p.Pod)})
	if (b.o.PodUID || b.o.PodLabels) && p.Pod != "" && meta != nil {
		if m, ok := meta.PodMeta(p.Namespace, p.Pod); ok {
			if b.o.PodUID {
				out = append(out, &dto.LabelPair{Name: proto.String(dcgm.LabelPodUID), Value: proto.String(m.UID)})
			}
			if b.o.PodLabels {
				for _, l := range m.Labels {
					if !b.reserved[l.Name] {
						out = append(out, &dto.LabelPair{Name: proto.String(l.Name), Value: proto.String(l.Value)})
					}
				}
			}
		}
	}
	sortLabels(out)
	return out
}

// families accumulates the metrics of one build by family.
type families struct {
	byName map[string]*dto.MetricFamily
}

func (fs *families) add(name, help string, typ dto.MetricType, labels []*dto.LabelPair, v float64) {
	mf := fs.byName[name]
	if mf == nil {
		mf = &dto.MetricFamily{Name: proto.String(name), Help: proto.String(help), Type: typ.Enum()}
		fs.byName[name] = mf
	}
	m := &dto.Metric{Label: labels}
	if typ == dto.MetricType_COUNTER {
		m.Counter = &dto.Counter{Value: proto.Float64(v)}
	} else {
		m.Gauge = &dto.Gauge{Value: proto.Float64(v)}
	}
	mf.Metric = append(mf.Metric, m)
}

// Build renders the states as metric families sorted by name. It runs
// once per collection, never per scrape. meta may be nil.
func (b *GPUBuilder) Build(states []DeviceState, meta PodMetadata) []*dto.MetricFamily {
	fs := families{byName: make(map[string]*dto.MetricFamily, len(b.fields)+4)}
	for i := range states {
		s := &states[i]
		dev := b.deviceLabels(s.Reading.Device)
		up := 1.0
		if !s.Reading.Healthy() {
			up = 0
		}
		fs.add(GPUUpName, "Whether the device was read successfully in the last collection (1) or not (0).",
			dto.MetricType_GAUGE, dev, up)
		if !s.Reading.Healthy() {
			continue
		}
		if s.Shares != nil {
			b.buildShares(&fs, s, dev, meta)
		} else {
			pods := s.Pods
			if len(pods) == 0 {
				pods = []PodRef{{}}
			}
			for _, p := range pods {
				lv := b.withPod(dev, p, meta)
				b.buildFields(&fs, &s.Reading, lv, nil)
				b.buildXIDCount(&fs, s.XIDWindow, lv)
			}
		}
		b.buildXIDs(&fs, s.Reading.XIDCounts, dev)
	}
	out := make([]*dto.MetricFamily, 0, len(fs.byName))
	for _, mf := range fs.byName {
		out = append(out, mf)
	}
	slices.SortFunc(out, func(a, c *dto.MetricFamily) int { return cmp.Compare(a.GetName(), c.GetName()) })
	return out
}

// buildFields renders a device's fields for one holder; share, when set,
// replaces its utilization and memory used.
func (b *GPUBuilder) buildFields(fs *families, r *gpu.Reading, lv []*dto.LabelPair, share *Share) {
	for i := range b.fields {
		f := &b.fields[i]
		v, ok := r.Get(f.Field)
		if share != nil && f.Field == gpu.FieldGPUUtil && share.HasUtil {
			v, ok = share.Util, true
		}
		if share != nil && f.Field == gpu.FieldFBUsed && share.HasMemory {
			v, ok = share.MemoryMiB, true
		}
		if ok {
			fs.add(f.Name, f.Help, f.Type, lv, v*f.scale)
		}
	}
}

// buildShares renders a shared GPU: one series set per share, and the
// marker that tells readers its GPU_UTIL series add up to the device's
// rather than repeat it.
func (b *GPUBuilder) buildShares(fs *families, s *DeviceState, dev []*dto.LabelPair, meta PodMetadata) {
	for i := range s.Shares {
		if s.Shares[i].HasUtil {
			fs.add(GPUSharedName, "1 when the device is shared by several pods and its GPU utilization and framebuffer-used series are each pod's own share (empty pod labels: processes in no pod), adding up to the device's; absent when they repeat the device's value.",
				dto.MetricType_GAUGE, dev, 1)
			break
		}
	}
	for i := range s.Shares {
		lv := b.withPod(dev, s.Shares[i].Pod, meta)
		b.buildFields(fs, &s.Reading, lv, &s.Shares[i])
		b.buildXIDCount(fs, s.XIDWindow, lv)
	}
}

// buildXIDs renders the per-code XID counters of a watched device, with
// the fatal codes at 0 until seen so that increase() sees the first one.
func (b *GPUBuilder) buildXIDs(fs *families, counts map[uint64]uint64, dev []*dto.LabelPair) {
	if counts == nil {
		return
	}
	const help = "XID errors seen since the exporter started, by XID code."
	emit := func(code, n uint64) {
		lv := append(slices.Clone(dev), &dto.LabelPair{Name: proto.String(LabelXID), Value: proto.String(strconv.FormatUint(code, 10))})
		sortLabels(lv)
		fs.add(XIDErrorsTotalName, help, dto.MetricType_COUNTER, lv, float64(n))
	}
	for _, code := range gpu.FatalXIDs {
		emit(code, counts[code])
	}
	for _, code := range slices.Sorted(maps.Keys(counts)) {
		if !slices.Contains(gpu.FatalXIDs, code) {
			emit(code, counts[code])
		}
	}
}

// buildXIDCount renders DCGM_EXP_XID_ERRORS_COUNT as dcgm-exporter does:
// one series per XID code seen within the window, with its count, or one
// without the xid label at 0.
func (b *GPUBuilder) buildXIDCount(fs *families, window map[uint64]uint64, lv []*dto.LabelPair) {
	if !b.xidCount || window == nil {
		return
	}
	const help = "Count of XID errors within the window (window_size_in_ms), by XID code."
	base := append(slices.Clone(lv), &dto.LabelPair{Name: proto.String(dcgm.LabelWindowSize), Value: proto.String(b.window)})
	if len(window) == 0 {
		sortLabels(base)
		fs.add(XIDErrorsCountName, help, dto.MetricType_GAUGE, base, 0)
		return
	}
	for _, code := range slices.Sorted(maps.Keys(window)) {
		l := append(slices.Clone(base), &dto.LabelPair{Name: proto.String(LabelXID), Value: proto.String(strconv.FormatUint(code, 10))})
		sortLabels(l)
		fs.add(XIDErrorsCountName, help, dto.MetricType_GAUGE, l, float64(window[code]))
	}
}
