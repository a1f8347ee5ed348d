//go:build linux && cgo

package nvml

import (
	"slices"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// notAvailable is NVML's "value not available" (NVML_VALUE_NOT_AVAILABLE),
// which the driver puts in a process's memory under some vGPU and WDDM
// configurations.
const notAvailable = ^uint64(0)

// readProcesses lists the compute processes on a whole GPU (time-sliced,
// MPS or exclusive) with their memory and their share of the GPU since
// the previous call. It runs in the background collection only.
//
// NVML keeps a ring of utilization samples per process, one per driver
// sampling period; asking for those newer than the last timestamp seen
// gives each sample exactly once. A process's share is the sum of its
// samples over the number of sampling periods in the window (distinct
// timestamps), so that the shares of all processes add up to the GPU's
// utilization over the window, as far as the driver's sampling allows.
func (b *Backend) readProcesses(g *gpuDevice) []gpu.Process {
	var procs []gpu.Process
	index := map[uint32]int{}
	get := func(pid uint32) *gpu.Process {
		i, ok := index[pid]
		if !ok {
			i = len(procs)
			index[pid] = i
			procs = append(procs, gpu.Process{PID: pid})
		}
		return &procs[i]
	}
	for _, list := range []func() ([]gonvml.ProcessInfo, gonvml.Return){
		g.handle.GetComputeRunningProcesses, g.handle.GetMPSComputeRunningProcesses,
	} {
		infos, ret := list()
		if ret != gonvml.SUCCESS {
			// Not supported (MPS off, old driver) or failed: the other
			// list and the samples still say what they can.
			continue
		}
		for _, info := range infos {
			p := get(info.Pid)
			if info.UsedGpuMemory != notAvailable {
				// An MPS client appears in both lists: take the larger.
				p.UsedMemoryMiB = max(p.UsedMemoryMiB, float64(info.UsedGpuMemory/mib))
				p.HasMemory = true
			}
		}
	}
	samples, ret := g.handle.GetProcessUtilization(g.lastProcSample)
	switch ret {
	case gonvml.SUCCESS:
	case gonvml.ERROR_NOT_FOUND:
		// No sample newer than the last: every process was idle.
		samples = nil
	default:
		return procs // shares unknown; memory still served
	}
	var periods []uint64
	for _, s := range samples {
		if s.TimeStamp <= g.lastProcSample {
			continue // the driver may repeat the boundary sample
		}
		periods = append(periods, s.TimeStamp)
	}
	slices.Sort(periods)
	periods = slices.Compact(periods)
	for i := range procs {
		procs[i].HasUtil = true
	}
	if len(periods) == 0 {
		return procs
	}
	n := float64(len(periods))
	for _, s := range samples {
		if s.TimeStamp <= g.lastProcSample {
			continue
		}
		// A process that exited within the window still had its share.
		p := get(s.Pid)
		p.HasUtil = true
		p.SMUtil += float64(s.SmUtil) / n
		p.MemUtil += float64(s.MemUtil) / n
	}
	g.lastProcSample = periods[len(periods)-1]
	return procs
}
