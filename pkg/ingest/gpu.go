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
	"fmt"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuscale/gpuscale/pkg/dcgm"
	"github.com/gpuscale/gpuscale/pkg/inference"
	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/store"
)

const mib = 1 << 20

// device accumulates one device's DCGM fields from one scrape.
type device struct {
	mig                       bool
	util, used, free, reserve float64
	power                     float64
	sm, tensor                float64 // percent
	// has marks the fields read, bad those rejected.
	has, bad uint8
	pods     map[store.Key]struct{}
	// shared marks a GPU whose GPU_UTIL series are each pod's share
	// (dcgm.GPUShared): utilSum is the device's, podUtil each pod's.
	shared  bool
	utilSum float64
	podUtil map[store.Key]float64
}

const (
	hasUtil uint8 = 1 << iota
	hasUsed
	hasFree
	hasReserved
	hasPower
	hasSM
	hasTensor
)

const hasMemory = hasUsed | hasFree | hasReserved

// fields the GPU signals are computed from, by their 4.8 name, which bit
// each sets, and the range of one device's reading, in the field's 4.8
// unit. Each is read under its 4.8 or its 4.10 name (dcgm.Field.Aliases),
// converted to the 4.8 unit, so that a signal is the same whichever
// schema the exporter speaks.
var gpuFields = []struct {
	name  string
	bit   uint8
	check func(float64) error
}{
	{dcgm.GPUUtil, hasUtil, signal.GPUUtilization.DeviceRange().Check},
	{dcgm.FBUsed, hasUsed, checkMiB},
	{dcgm.FBFree, hasFree, checkMiB},
	{dcgm.FBReserved, hasReserved, checkMiB},
	{dcgm.PowerUsage, hasPower, signal.GPUPowerWatts.DeviceRange().Check},
	{dcgm.ProfSMActive, hasSM, checkRatio(signal.GPUSMActive)},
	{dcgm.ProfTensorActive, hasTensor, checkRatio(signal.GPUTensorActive)},
}

// aliases are each gpuFields entry's names, the 4.8 one first.
var aliases = func() [][]dcgm.Alias {
	out := make([][]dcgm.Alias, len(gpuFields))
	for i, f := range gpuFields {
		field, _, ok := dcgm.Lookup(f.name)
		if !ok {
			panic("ingest: " + f.name + " is not in package dcgm")
		}
		out[i] = field.Aliases()
	}
	return out
}()

// family returns the family a scrape holds field i under, and the factor
// to its 4.8 unit: the first of its names the scrape has. An exporter
// speaks one schema; should a scrape hold both, the 4.8 one is read.
func family(families map[string]*dto.MetricFamily, i int) (*dto.MetricFamily, string, float64) {
	for _, a := range aliases[i] {
		if mf := families[a.Name]; mf != nil {
			return mf, a.Name, a.ToUnit48
		}
	}
	return nil, "", 0
}

// checkRatio checks a DCGM profiling ratio (0 to 1) against sig, a percent.
func checkRatio(sig signal.Signal) func(float64) error {
	return func(v float64) error { return sig.DeviceRange().Check(v * 100) }
}

// checkMiB checks a framebuffer reading, in MiB: used, free and reserved
// are each a part of one device's memory.
func checkMiB(v float64) error {
	return signal.GPUMemoryUsedBytes.DeviceRange().Check(v * mib)
}

// GPUFamilies returns the families GPU reads, in both schemas; a scraper
// may skip the rest.
func GPUFamilies() []string {
	var names []string
	for _, as := range aliases {
		for _, a := range as {
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
	devs := map[string]*device{}
	seen := newSeriesSet()
	for i, f := range gpuFields {
		mf, name, toUnit := family(families, i)
		if mf == nil {
			continue
		}
		for _, m := range mf.GetMetric() {
			if err := seen.add(name, m); err != nil {
				return nil, store.Sample{}, nil, err
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
				d.bad |= f.bit
				rejected = append(rejected, rejection(inference.Describe(name, m), err))
				continue
			}
			d.set(f.bit, v)
			if f.bit == hasUtil {
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
	if len(devs) == 0 {
		return nil, store.Sample{}, nil, ErrNoGPUSeries
	}
	if mf := families[dcgm.GPUShared]; mf != nil {
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
			if err := signal.GPUUtilization.DeviceRange().Check(d.utilSum); err != nil && d.bad&hasUtil == 0 {
				d.bad |= hasUtil
				rejected = append(rejected, rejection("the pods' shares of GPU "+key, err))
			}
		}
	}
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
	return pods, nodeAgg.sample(&rejected, nil), rejected, nil
}

// deviceUtil is the device's utilization: the sum of the pods' shares on a
// shared GPU, else its value (which every pod's series repeats).
func (d *device) deviceUtil() float64 {
	if d.shared {
		return d.utilSum
	}
	return d.util
}

// podShare is pod k's utilization of the device: its own share on a
// shared GPU, else the device's.
func (d *device) podShare(k store.Key) float64 {
	if d.shared {
		return d.podUtil[k]
	}
	return d.util
}

func (d *device) set(bit uint8, v float64) {
	d.has |= bit
	switch bit {
	case hasUtil:
		d.util = v
	case hasUsed:
		d.used = v
	case hasFree:
		d.free = v
	case hasReserved:
		d.reserve = v
	case hasPower:
		d.power = v
	case hasSM:
		d.sm = v * 100
	case hasTensor:
		d.tensor = v * 100
	}
}

// aggregate combines devices: utilization is a mean over the devices that
// report it (MIG instances do not), memory and power are sums. A device
// whose reading was rejected voids what that reading is part of.
type aggregate struct {
	utilSum            float64
	utilN              int
	used, total, power float64
	memN, powerN       int
	sm, tensor         float64
	smN, tensorN       int
	void               uint8 // has* bits of rejected readings
}

func (a *aggregate) add(d *device, util float64) {
	a.void |= d.bad
	if d.has&hasUtil != 0 {
		a.utilSum += util
		a.utilN++
	}
	if d.has&(hasUsed|hasFree) == hasUsed|hasFree {
		a.used += d.used
		a.total += d.used + d.free + d.reserve
		a.memN++
	}
	if d.has&hasPower != 0 {
		a.power += d.power
		a.powerN++
	}
	if d.has&hasSM != 0 {
		a.sm += d.sm
		a.smN++
	}
	if d.has&hasTensor != 0 {
		a.tensor += d.tensor
		a.tensorN++
	}
}

// sample returns the aggregate's signals, of the pod k or, when k is nil,
// of the node. One that leaves its signal's range (more devices than
// MaxDevices, each in range) is rejected as what the devices add up to.
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
	if a.utilN > 0 && a.void&hasUtil == 0 {
		set(signal.GPUUtilization, a.utilSum/float64(a.utilN), a.utilN)
	}
	if a.memN > 0 && a.void&hasMemory == 0 {
		set(signal.GPUMemoryUsedBytes, a.used*mib, a.memN)
		if a.total > 0 {
			// used/total first: at most 1 however it rounds, so
			// the percentage is at most 100.
			set(signal.GPUMemoryUtilization, 100*(a.used/a.total), a.memN)
		}
	}
	if a.powerN > 0 && a.void&hasPower == 0 {
		set(signal.GPUPowerWatts, a.power, a.powerN)
	}
	if a.smN > 0 && a.void&hasSM == 0 {
		set(signal.GPUSMActive, a.sm/float64(a.smN), a.smN)
	}
	if a.tensorN > 0 && a.void&hasTensor == 0 {
		set(signal.GPUTensorActive, a.tensor/float64(a.tensorN), a.tensorN)
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
