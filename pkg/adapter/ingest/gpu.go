// Package ingest turns parsed scrapes into the store's samples: the GPU
// exporter's DCGM series into per-pod and per-node GPU signals, and an
// inference server's dialect into the common inference signals.
//
// It is the validation step between parsing and the store. A scrape that
// holds one series twice, or a malformed TTFT histogram, is rejected whole
// (an error, see Reason). A value that is not finite or outside its signal's
// physical range (signal.Signal.Check), and a sum that leaves it, is
// rejected alone: it comes back as a Rejection, and every sum or mean it
// belongs to is no value, while the rest of the scrape is stored.
package ingest

import (
	"cmp"
	"fmt"
	"slices"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuscale/gpuscale/pkg/adapter/inference"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/gpu/dcgm"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

const mib = 1 << 20

// device accumulates one device's DCGM fields from one scrape: vals[i] is
// gpuFields[i]'s reading, already scaled to its signal for a mean.
type device struct {
	mig  bool
	vals [maxGPUFields]float64
	// has marks the fields read, bad those rejected (bit i: gpuFields[i]).
	has, bad fieldSet
	pods     map[store.Key]struct{}
	// shared marks a GPU whose GPU_UTIL series are each pod's share
	// (dcgm.GPUShared): utilSum is the device's, podUtil each pod's.
	shared  bool
	utilSum float64
	podUtil map[store.Key]float64
}

// fieldSet holds one bit per gpuFields entry.
type fieldSet uint16

const maxGPUFields = 16

// gpuField is one field the GPU signals are computed from: a gpu.Specs
// entry with a Feed, the signal it feeds and the check of one device's
// reading, in the field's 4.8 unit. Each is read under its 4.8 or its
// 4.10 name (dcgm.Field.Aliases), converted to the 4.8 unit, so that a
// signal is the same whichever schema the exporter speaks.
type gpuField struct {
	field gpu.Field
	feed  gpu.Feed
	// sig is the signal the field feeds; for a Part, the signal whose
	// per-device range checks it (memory parts: gpu_memory_used_bytes).
	sig     signal.Signal
	aliases []dcgm.Alias
}

// check checks one device's reading against its signal's per-device range.
func (f *gpuField) check(v float64) error { return f.sig.DeviceRange().Check(v * f.feed.Scale) }

// gpuFields are the fields of gpu.Specs that feed a signal, in the order
// of the signals that check them, a signal's own field before its parts.
// utilField and memory* index it: utilization on a shared GPU and memory
// utilization, computed from three fields, are the code below.
var gpuFields, utilField, memUsed, memFree, memReserved = func() ([]gpuField, int, int, int, int) {
	var out []gpuField
	for i := range gpu.Specs {
		spec := &gpu.Specs[i]
		if spec.Feed == nil {
			continue
		}
		sig, ok := spec.Feed.Signal, spec.Feed.Signal < signal.NumSignals && spec.Feed.Signal.Source() == signal.SourceGPU
		if spec.Feed.Agg == gpu.Part {
			sig, ok = signal.GPUMemoryUsedBytes, slices.Contains(memoryParts, spec.Field)
		}
		if !ok {
			panic("ingest: " + spec.Name + " feeds " + spec.Feed.Signal.String() + ", which is no GPU signal")
		}
		var aliases []dcgm.Alias
		for j := range spec.DCGM {
			aliases = append(aliases, spec.DCGM[j].Aliases()...)
		}
		out = append(out, gpuField{field: spec.Field, feed: *spec.Feed, sig: sig, aliases: aliases})
	}
	slices.SortStableFunc(out, func(a, b gpuField) int {
		part := func(f gpuField) int {
			if f.feed.Agg == gpu.Part {
				return 1
			}
			return 0
		}
		return cmp.Or(cmp.Compare(a.sig, b.sig), cmp.Compare(part(a), part(b)))
	})
	if len(out) > maxGPUFields {
		panic("ingest: more GPU fields than a fieldSet holds")
	}
	at := func(f gpu.Field) int {
		for i := range out {
			if out[i].field == f {
				return i
			}
		}
		panic("ingest: " + f.String() + " feeds no signal")
	}
	return out, at(gpu.FieldGPUUtil), at(gpu.FieldFBUsed), at(gpu.FieldFBFree), at(gpu.FieldFBReserved)
}()

// memoryParts are the fields besides the memory used that
// gpu_memory_utilization is computed from.
var memoryParts = []gpu.Field{gpu.FieldFBFree, gpu.FieldFBReserved}

// memoryFields are the bits of the memory fields.
var memoryFields = bit(memUsed) | bit(memFree) | bit(memReserved)

func bit(i int) fieldSet { return 1 << fieldSet(i) }

// family returns the family a scrape holds field i under, and the factor
// to its 4.8 unit: the first of its names the scrape has. An exporter
// speaks one schema; should a scrape hold both, the 4.8 one is read.
func family(families map[string]*dto.MetricFamily, i int) (*dto.MetricFamily, string, float64) {
	for _, a := range gpuFields[i].aliases {
		if mf := families[a.Name]; mf != nil {
			return mf, a.Name, a.ToUnit48
		}
	}
	return nil, "", 0
}

// GPUFamilies returns the families GPU reads, in both schemas; a scraper
// may skip the rest.
func GPUFamilies() []string {
	var names []string
	for _, f := range gpuFields {
		for _, a := range f.aliases {
			names = append(names, a.Name)
		}
	}
	return append(names, dcgm.GPUShared)
}

// GPU computes, from one exporter scrape, the GPU signals of every pod the
// exporter attributes devices to, and of the node as a whole. It reads
// dcgm-exporter's names and labels in both its schemas (4.8 and earlier,
// 4.10), converting units, so it works on NVIDIA's exporter of any
// version and on gpuscale's in either mode, with the same result.
// It fails with ErrNoGPUSeries when the scrape has none of its fields, and
// with ErrDuplicateSeries when one holds a series twice. Rejected lists the
// readings and sums not stored.
func GPU(families map[string]*dto.MetricFamily) (pods map[store.Key]store.Sample, node store.Sample, rejected []Rejection, err error) {
	devs, rejected, err := readDevices(families)
	if err != nil {
		return nil, store.Sample{}, nil, err
	}
	if len(devs) == 0 {
		return nil, store.Sample{}, nil, ErrNoGPUSeries
	}
	rejected = markShared(families, devs, rejected)
	pods, node, rejected = aggregateDevices(devs, rejected)
	return pods, node, rejected, nil
}

// readDevices reads every GPU field's series into the devices they are of,
// keyed by UUID and MIG instance, with the pods each is attributed to. A
// reading out of range is rejected and marks its field bad on the device.
func readDevices(families map[string]*dto.MetricFamily) (map[string]*device, []Rejection, error) {
	devs := map[string]*device{}
	var rejected []Rejection
	seen := newSeriesSet()
	for i := range gpuFields {
		f := &gpuFields[i]
		mf, name, toUnit := family(families, i)
		if mf == nil {
			continue
		}
		for _, m := range mf.GetMetric() {
			if err := seen.add(name, m); err != nil {
				return nil, nil, err
			}
			lbl := labelMap(m)
			key := lbl[dcgm.LabelUUID] + "/" + lbl[dcgm.LabelGPUIID]
			d := devs[key]
			if d == nil {
				d = &device{mig: lbl[dcgm.LabelGPUIID] != "", pods: map[store.Key]struct{}{}}
				devs[key] = d
			}
			// The device's pods are recorded even when its reading is
			// rejected: their sums and means must not go on without it.
			var podKey store.Key
			if ns, pod := lbl[dcgm.LabelNamespace], lbl[dcgm.LabelPod]; ns != "" && pod != "" {
				podKey = store.Key{Namespace: ns, Name: pod}
				d.pods[podKey] = struct{}{}
			}
			v, err := value(mf, m)
			v *= toUnit
			if err == nil {
				err = f.check(v)
			}
			if err != nil {
				d.bad |= bit(i)
				rejected = append(rejected, rejection(inference.Describe(name, m), err))
				continue
			}
			d.set(i, v)
			if i == utilField {
				d.utilSum += v
				if podKey.Name != "" {
					if d.podUtil == nil {
						d.podUtil = map[store.Key]float64{}
					}
					d.podUtil[podKey] = v
				}
			}
		}
	}
	return devs, rejected, nil
}

// markShared marks the devices the exporter reports as shared (time-sliced
// or MPS), whose series are the pods' shares: their sum is the device's,
// and shares that add up past the device are all rejected.
func markShared(families map[string]*dto.MetricFamily, devs map[string]*device, rejected []Rejection) []Rejection {
	mf := families[dcgm.GPUShared]
	if mf == nil {
		return rejected
	}
	for _, m := range mf.GetMetric() {
		lbl := labelMap(m)
		key := lbl[dcgm.LabelUUID] + "/" + lbl[dcgm.LabelGPUIID]
		d := devs[key]
		if d == nil || d.shared {
			continue
		}
		d.shared = true
		// Shares in range each can add up past the device: none of
		// them is then believed.
		if err := signal.GPUUtilization.DeviceRange().Check(d.utilSum); err != nil && d.bad&bit(utilField) == 0 {
			d.bad |= bit(utilField)
			rejected = append(rejected, rejection("the pods' shares of GPU "+key, err))
		}
	}
	return rejected
}

// aggregateDevices sums and averages the devices' readings per pod and for
// the node; a MIG instance counts for its pods only.
func aggregateDevices(devs map[string]*device, rejected []Rejection) (pods map[store.Key]store.Sample, node store.Sample, _ []Rejection) {
	var nodeAgg aggregate
	byPod := map[store.Key]*aggregate{}
	for _, d := range devs {
		if !d.mig {
			// A shared GPU's series are shares: the device is their sum.
			nodeAgg.add(d, d.deviceUtil())
		}
		for k := range d.pods {
			a := byPod[k]
			if a == nil {
				a = &aggregate{}
				byPod[k] = a
			}
			a.add(d, d.podShare(k))
		}
	}
	pods = make(map[store.Key]store.Sample, len(byPod))
	for k, a := range byPod {
		pods[k] = a.sample(&rejected, &k)
	}
	return pods, nodeAgg.sample(&rejected, nil), rejected
}

// deviceUtil is the device's utilization: the sum of the pods' shares on a
// shared GPU, else its value (which every pod's series repeats).
func (d *device) deviceUtil() float64 {
	if d.shared {
		return d.utilSum
	}
	return d.vals[utilField]
}

// podShare is pod k's utilization of the device: its own share on a
// shared GPU, else the device's.
func (d *device) podShare(k store.Key) float64 {
	if d.shared {
		return d.podUtil[k]
	}
	return d.vals[utilField]
}

// set records field i's reading: a mean's scaled to its signal, a sum's
// and a part's as read (their sums are scaled).
func (d *device) set(i int, v float64) {
	d.has |= bit(i)
	if gpuFields[i].feed.Agg == gpu.Mean {
		v *= gpuFields[i].feed.Scale
	}
	d.vals[i] = v
}

// aggregate combines devices: a mean is over the devices that report the
// field (MIG instances report no utilization), a sum over every device.
// Memory is summed over the devices that report both used and free, so
// that used and total count the same devices. A device whose reading was
// rejected voids what that reading is part of.
type aggregate struct {
	sum         [maxGPUFields]float64
	n           [maxGPUFields]int
	used, total float64
	memN        int
	void        fieldSet // bits of rejected readings
}

func (a *aggregate) add(d *device, util float64) {
	a.void |= d.bad
	for i := range gpuFields {
		if d.has&bit(i) == 0 || memoryFields&bit(i) != 0 {
			continue
		}
		v := d.vals[i]
		if i == utilField {
			v = util
		}
		a.sum[i] += v
		a.n[i]++
	}
	if d.has&(bit(memUsed)|bit(memFree)) == bit(memUsed)|bit(memFree) {
		a.used += d.vals[memUsed]
		a.total += d.vals[memUsed] + d.vals[memFree] + d.vals[memReserved]
		a.memN++
	}
}

// sample returns the aggregate's signals, of the pod k or, when k is nil,
// of the node, in the order of gpuFields. One that leaves its signal's
// range (more devices than MaxDevices, each in range) is rejected as what
// the devices add up to.
func (a *aggregate) sample(rejected *[]Rejection, k *store.Key) store.Sample {
	var s store.Sample
	set := func(sig signal.Signal, v float64, n int) {
		if err := sig.Check(v); err != nil {
			what := "the node"
			if k != nil {
				what = "pod " + k.Namespace + "/" + k.Name
			}
			*rejected = append(*rejected, rejection(fmt.Sprintf("%s over %s's %d devices", sig, what, n), err))
			return
		}
		s.Set(sig, v)
	}
	for i := range gpuFields {
		f := &gpuFields[i]
		switch {
		case i == memUsed:
			if a.memN > 0 && a.void&memoryFields == 0 {
				set(signal.GPUMemoryUsedBytes, a.used*mib, a.memN)
				if a.total > 0 {
					// used/total first: at most 1 however it rounds, so
					// the percentage is at most 100.
					set(signal.GPUMemoryUtilization, 100*(a.used/a.total), a.memN)
				}
			}
		case memoryFields&bit(i) != 0, a.n[i] == 0, a.void&bit(i) != 0:
		case f.feed.Agg == gpu.Mean:
			set(f.sig, a.sum[i]/float64(a.n[i]), a.n[i])
		case f.feed.Agg == gpu.Sum:
			set(f.sig, a.sum[i]*f.feed.Scale, a.n[i])
		}
	}
	return s
}

// value reads a gauge, tolerating counter and untyped series as
// dcgm-exporter's configurations do. Its range is the field's to check.
func value(mf *dto.MetricFamily, m *dto.Metric) (float64, error) {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue(), nil
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue(), nil
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue(), nil
	}
	return 0, fmt.Errorf("not a gauge: a %s", mf.GetType())
}

func labelMap(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}
