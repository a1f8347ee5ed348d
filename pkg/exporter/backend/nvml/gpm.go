//go:build linux && cgo

package nvml

import (
	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// gpmMetrics are the GPM metrics read, the field each fills and the factor
// from NVML's unit to dcgm-exporter's: GPM gives activities in percent,
// DCGM's profiling fields are ratios.
var gpmMetrics = []struct {
	id     gonvml.GpmMetricId
	field  gpu.Field
	factor float64
}{
	{gonvml.GPM_METRIC_GRAPHICS_UTIL, gpu.FieldGREngineActive, 0.01},
	{gonvml.GPM_METRIC_SM_UTIL, gpu.FieldSMActive, 0.01},
	{gonvml.GPM_METRIC_SM_OCCUPANCY, gpu.FieldSMOccupancy, 0.01},
	{gonvml.GPM_METRIC_ANY_TENSOR_UTIL, gpu.FieldTensorActive, 0.01},
	{gonvml.GPM_METRIC_DRAM_BW_UTIL, gpu.FieldDRAMActive, 0.01},
	{gonvml.GPM_METRIC_FP64_UTIL, gpu.FieldFP64Active, 0.01},
	{gonvml.GPM_METRIC_FP32_UTIL, gpu.FieldFP32Active, 0.01},
	{gonvml.GPM_METRIC_FP16_UTIL, gpu.FieldFP16Active, 0.01},
	{gonvml.GPM_METRIC_PCIE_TX_PER_SEC, gpu.FieldPCIeTxBytes, 1},
	{gonvml.GPM_METRIC_PCIE_RX_PER_SEC, gpu.FieldPCIeRxBytes, 1},
	{gonvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, gpu.FieldNVLinkTxBytes, 1},
	{gonvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, gpu.FieldNVLinkRxBytes, 1},
}

// gpmPair is the two GPM samples of one GPU or GPU instance: the metrics
// are the difference between the previous collection's and this one's.
type gpmPair struct {
	prev, cur gonvml.GpmSample
	// primed says prev holds a sample.
	primed bool
}

// gpmSampler reads GPM samples of one device or one of its GPU instances.
type gpmSampler func(s gonvml.GpmSample) gonvml.Return

// readGPM takes a sample into p and, from the second on, sets the
// profiling fields the device answers. A GPU without GPM support, or a
// metric it does not answer, leaves the fields absent, never 0. Errors
// are not the device's: each metric fails alone, listed in FieldErrors,
// and the device's other fields stand.
func (b *Backend) readGPM(p *gpmPair, sample gpmSampler, r *gpu.Reading) {
	if p.cur == nil {
		var ret gonvml.Return
		if p.prev, ret = b.lib.GpmSampleAlloc(); ret != gonvml.SUCCESS {
			return
		}
		if p.cur, ret = b.lib.GpmSampleAlloc(); ret != gonvml.SUCCESS {
			p.prev.Free()
			p.prev, p.cur = nil, nil
			return
		}
	}
	if ret := sample(p.cur); ret != gonvml.SUCCESS {
		if p.primed {
			b.gpmFailed(r, ret)
		}
		p.primed = false
		return
	}
	prev := p.prev
	p.prev, p.cur = p.cur, prev
	if !p.primed {
		p.primed = true
		return
	}
	q := gonvml.GpmMetricsGetType{NumMetrics: uint32(len(gpmMetrics)), Sample1: prev, Sample2: p.prev}
	for i, m := range gpmMetrics {
		q.Metrics[i].MetricId = uint32(m.id)
	}
	if ret := b.lib.GpmMetricsGet(&q); ret != gonvml.SUCCESS {
		b.gpmFailed(r, ret)
		return
	}
	for i, m := range gpmMetrics {
		got := q.Metrics[i]
		switch ret := gonvml.Return(got.NvmlReturn); {
		case ret != gonvml.SUCCESS:
			b.fieldFailed(r, m.field, ret)
		case got.MetricId != uint32(m.id):
			b.fieldFailed(r, m.field, gonvml.ERROR_UNKNOWN)
		default:
			r.Set(m.field, got.Value*m.factor)
		}
	}
}

// gpmFailed lists every profiling field as failed with ret.
func (b *Backend) gpmFailed(r *gpu.Reading, ret gonvml.Return) {
	for _, m := range gpmMetrics {
		b.fieldFailed(r, m.field, ret)
	}
}

// freeGPM releases a pair's samples.
func freeGPM(p *gpmPair) {
	if p.cur != nil {
		p.prev.Free()
		p.cur.Free()
		p.prev, p.cur = nil, nil
	}
}
