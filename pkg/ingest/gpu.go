// Package ingest turns parsed scrapes into the store's samples: the GPU
// exporter's DCGM series into per-pod and per-node GPU signals, and an
// inference server's dialect into the common inference signals.
package ingest

import (
	dto "github.com/prometheus/client_model/go"

	"github.com/gpuscale/gpuscale/pkg/metrics"
	"github.com/gpuscale/gpuscale/pkg/store"
)

const mib = 1 << 20

// device accumulates one device's DCGM fields from one scrape.
type device struct {
	mig                       bool
	util, used, free, reserve float64
	power                     float64
	has                       uint8
	pods                      map[store.Key]struct{}
}

const (
	hasUtil uint8 = 1 << iota
	hasUsed
	hasFree
	hasReserved
	hasPower
)

// fields the GPU signals are computed from, and which bit each sets.
var gpuFields = []struct {
	name string
	bit  uint8
}{
	{"DCGM_FI_DEV_GPU_UTIL", hasUtil},
	{"DCGM_FI_DEV_FB_USED", hasUsed},
	{"DCGM_FI_DEV_FB_FREE", hasFree},
	{"DCGM_FI_DEV_FB_RESERVED", hasReserved},
	{"DCGM_FI_DEV_POWER_USAGE", hasPower},
}

// GPUFamilies returns the families GPU reads; a scraper may skip the rest.
func GPUFamilies() []string {
	names := make([]string, len(gpuFields))
	for i, f := range gpuFields {
		names[i] = f.name
	}
	return names
}

// GPU computes, from one exporter scrape, the GPU signals of every pod the
// exporter attributes devices to, and of the node as a whole. It reads
// dcgm-exporter's names and labels, so it works on NVIDIA's exporter too.
func GPU(families map[string]*dto.MetricFamily) (pods map[store.Key]store.Sample, node store.Sample, ok bool) {
	devs := map[string]*device{}
	for _, f := range gpuFields {
		mf := families[f.name]
		if mf == nil {
			continue
		}
		for _, m := range mf.GetMetric() {
			v, valid := value(m)
			if !valid {
				continue
			}
			lbl := labelMap(m)
			key := lbl[metrics.LabelUUID] + "/" + lbl[metrics.LabelGPUIID]
			d := devs[key]
			if d == nil {
				d = &device{mig: lbl[metrics.LabelGPUIID] != "", pods: map[store.Key]struct{}{}}
				devs[key] = d
			}
			d.set(f.bit, v)
			if ns, pod := lbl[metrics.LabelNamespace], lbl[metrics.LabelPod]; ns != "" && pod != "" {
				d.pods[store.Key{Namespace: ns, Name: pod}] = struct{}{}
			}
		}
	}
	if len(devs) == 0 {
		return nil, store.Sample{}, false
	}
	var nodeAgg, none aggregate
	byPod := map[store.Key]*aggregate{}
	for _, d := range devs {
		if !d.mig {
			nodeAgg.add(d)
		}
		if len(d.pods) == 0 {
			none.add(d)
		}
		for k := range d.pods {
			a := byPod[k]
			if a == nil {
				a = &aggregate{}
				byPod[k] = a
			}
			a.add(d)
		}
	}
	pods = make(map[store.Key]store.Sample, len(byPod))
	for k, a := range byPod {
		pods[k] = a.sample()
	}
	return pods, nodeAgg.sample(), true
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
	}
}

// aggregate combines devices: utilization is a mean over the devices that
// report it (MIG instances do not), memory and power are sums.
type aggregate struct {
	utilSum            float64
	utilN              int
	used, total, power float64
	memN, powerN       int
}

func (a *aggregate) add(d *device) {
	if d.has&hasUtil != 0 {
		a.utilSum += d.util
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
}

func (a *aggregate) sample() store.Sample {
	var s store.Sample
	if a.utilN > 0 {
		s.Set(store.GPUUtilization, a.utilSum/float64(a.utilN))
	}
	if a.memN > 0 {
		s.Set(store.GPUMemoryUsedBytes, a.used*mib)
		if a.total > 0 {
			s.Set(store.GPUMemoryUtilization, 100*a.used/a.total)
		}
	}
	if a.powerN > 0 {
		s.Set(store.GPUPowerWatts, a.power)
	}
	return s
}

func value(m *dto.Metric) (float64, bool) {
	var v float64
	switch {
	case m.GetGauge() != nil:
		v = m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		v = m.GetCounter().GetValue()
	case m.GetUntyped() != nil:
		v = m.GetUntyped().GetValue()
	default:
		return 0, false
	}
	// NaN and negative readings are a broken exporter, not a measurement.
	return v, v == v && v >= 0
}

func labelMap(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}
