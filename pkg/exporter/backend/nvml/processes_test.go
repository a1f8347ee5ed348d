//go:build linux && cgo

package nvml

import (
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// procStep is what the driver answers in one collection: the running
// processes (compute and MPS lists) and the utilization samples newer than
// the timestamp the backend must ask with.
type procStep struct {
	name      string
	compute   []gonvml.ProcessInfo
	mps       []gonvml.ProcessInfo
	mpsRet    gonvml.Return
	samples   []gonvml.ProcessUtilizationSample
	utilRet   gonvml.Return
	wantSince uint64
	want      []gpu.Process
}

func sample(pid uint32, ts uint64, sm, mem uint32) gonvml.ProcessUtilizationSample {
	return gonvml.ProcessUtilizationSample{Pid: pid, TimeStamp: ts, SmUtil: sm, MemUtil: mem}
}

func TestProcessesOnATimeSlicedGPU(t *testing.T) {
	steps := []procStep{{
		name:    "two processes share the GPU",
		compute: []gonvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 20 * gib}, {Pid: 200, UsedGpuMemory: 4 * gib}},
		mpsRet:  gonvml.ERROR_NOT_SUPPORTED,
		// Three sampling periods; the GPU was 50% busy on average.
		samples: []gonvml.ProcessUtilizationSample{
			sample(100, 10, 30, 10), sample(200, 10, 10, 2),
			sample(100, 20, 30, 10), sample(200, 20, 20, 4),
			sample(100, 30, 30, 10), sample(200, 30, 30, 6),
		},
		wantSince: 0,
		want: []gpu.Process{
			{PID: 100, SMUtil: 30, MemUtil: 10, HasUtil: true, UsedMemoryMiB: 20 * 1024, HasMemory: true},
			{PID: 200, SMUtil: 20, MemUtil: 4, HasUtil: true, UsedMemoryMiB: 4 * 1024, HasMemory: true},
		},
	}, {
		name: "one exits during the window, one appears; the boundary sample is repeated",
		compute: []gonvml.ProcessInfo{
			{Pid: 100, UsedGpuMemory: 20 * gib}, {Pid: 300, UsedGpuMemory: uint64(notAvailable)},
		},
		mpsRet: gonvml.ERROR_NOT_SUPPORTED,
		samples: []gonvml.ProcessUtilizationSample{
			sample(200, 30, 30, 6), // already seen
			sample(200, 40, 40, 8), sample(100, 40, 20, 5),
			sample(300, 50, 60, 12),
		},
		wantSince: 30,
		want: []gpu.Process{
			{PID: 100, SMUtil: 10, MemUtil: 2.5, HasUtil: true, UsedMemoryMiB: 20 * 1024, HasMemory: true},
			{PID: 300, SMUtil: 30, MemUtil: 6, HasUtil: true},
			{PID: 200, SMUtil: 20, MemUtil: 4, HasUtil: true},
		},
	}, {
		name:      "no sample since: every process idle",
		compute:   []gonvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 20 * gib}},
		mpsRet:    gonvml.ERROR_NOT_SUPPORTED,
		utilRet:   gonvml.ERROR_NOT_FOUND,
		wantSince: 50,
		want:      []gpu.Process{{PID: 100, HasUtil: true, UsedMemoryMiB: 20 * 1024, HasMemory: true}},
	}, {
		name:      "MPS clients are listed twice; the larger memory is kept",
		compute:   []gonvml.ProcessInfo{{Pid: 400, UsedGpuMemory: 1 * gib}},
		mps:       []gonvml.ProcessInfo{{Pid: 400, UsedGpuMemory: 3 * gib}, {Pid: 500, UsedGpuMemory: 2 * gib}},
		samples:   []gonvml.ProcessUtilizationSample{sample(400, 60, 70, 1), sample(500, 60, 25, 1)},
		wantSince: 50,
		want: []gpu.Process{
			{PID: 400, SMUtil: 70, MemUtil: 1, HasUtil: true, UsedMemoryMiB: 3 * 1024, HasMemory: true},
			{PID: 500, SMUtil: 25, MemUtil: 1, HasUtil: true, UsedMemoryMiB: 2 * 1024, HasMemory: true},
		},
	}, {
		name:      "per-process utilization not supported: memory only",
		compute:   []gonvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 20 * gib}},
		mpsRet:    gonvml.ERROR_NOT_SUPPORTED,
		utilRet:   gonvml.ERROR_NOT_SUPPORTED,
		wantSince: 60,
		want:      []gpu.Process{{PID: 100, UsedMemoryMiB: 20 * 1024, HasMemory: true}},
	}}

	f := newFixture(healthyGPU(0))
	var cur procStep
	var since []uint64
	d := f.devices[0]
	d.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) { return cur.compute, gonvml.SUCCESS }
	d.GetMPSComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) { return cur.mps, cur.mpsRet }
	d.GetProcessUtilizationFunc = func(last uint64) ([]gonvml.ProcessUtilizationSample, gonvml.Return) {
		since = append(since, last)
		return cur.samples, cur.utilRet
	}
	b := newBackend(t, f, Options{Processes: true})
	for _, step := range steps {
		cur = step
		rs := collect(t, b)
		if got := since[len(since)-1]; got != step.wantSince {
			t.Errorf("%s: asked for samples since %d, want %d", step.name, got, step.wantSince)
		}
		got := rs[0].Processes
		if len(got) != len(step.want) {
			t.Fatalf("%s: processes = %+v, want %+v", step.name, got, step.want)
		}
		for i := range got {
			if got[i] != step.want[i] {
				t.Errorf("%s: process %d = %+v, want %+v", step.name, i, got[i], step.want[i])
			}
		}
	}
}

// TestProcessSharesSumToTheDevice checks, over a run where processes come
// and go on a time-sliced GPU, that their shares add up to the GPU's mean
// utilization over each window.
func TestProcessSharesSumToTheDevice(t *testing.T) {
	f := newFixture(healthyGPU(0))
	var samples []gonvml.ProcessUtilizationSample
	d := f.devices[0]
	d.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) { return nil, gonvml.SUCCESS }
	d.GetMPSComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) { return nil, gonvml.ERROR_NOT_SUPPORTED }
	d.GetProcessUtilizationFunc = func(last uint64) ([]gonvml.ProcessUtilizationSample, gonvml.Return) {
		var out []gonvml.ProcessUtilizationSample
		for _, s := range samples {
			if s.TimeStamp > last {
				out = append(out, s)
			}
		}
		return out, gonvml.SUCCESS
	}
	b := newBackend(t, f, Options{Processes: true})
	ts := uint64(0)
	for window := range 6 {
		// Per period, the GPU's busy time split among the processes alive:
		// pids window..window+2, each busy (pid*7+period)%30 percent.
		var deviceSum float64
		const periods = 6
		for p := range periods {
			ts += 166_667
			for pid := uint32(window); pid < uint32(window+3); pid++ {
				sm := (pid*7 + uint32(p)) % 30
				samples = append(samples, sample(pid, ts, sm, 0))
				deviceSum += float64(sm)
			}
		}
		rs := collect(t, b)
		var shares float64
		for _, p := range rs[0].Processes {
			shares += p.SMUtil
		}
		if want := deviceSum / periods; shares < want-1e-9 || shares > want+1e-9 {
			t.Errorf("window %d: shares add up to %v, the device was %v busy", window, shares, want)
		}
	}
}

func TestProcessesNotReadWhenOff(t *testing.T) {
	f := newFixture(healthyGPU(0))
	rs := collect(t, newBackend(t, f, Options{}))
	if rs[0].Processes != nil || len(f.devices[0].GetProcessUtilizationCalls()) != 0 {
		t.Errorf("processes read while off: %+v", rs[0].Processes)
	}
}
