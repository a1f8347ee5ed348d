package exporter

import (
	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/metrics"
)

// Reasons a process's share goes to no pod. ProcessPods implementations
// return the first four; the collector adds ReasonNotAssigned.
const (
	ReasonNoCgroup         = "no_cgroup"
	ReasonNotInPod         = "not_in_pod"
	ReasonUnknownContainer = "unknown_container"
	ReasonPodMismatch      = "pod_mismatch"
	ReasonNotAssigned      = "not_assigned"
)

var attributionReasons = []string{ReasonNoCgroup, ReasonNotInPod, ReasonUnknownContainer, ReasonPodMismatch, ReasonNotAssigned}

// shares splits a shared GPU among the pods that hold it (per the kubelet)
// by their processes. A pod that holds the GPU and runs nothing on it has
// a share of 0. A process is counted for its pod only if that pod holds
// the GPU: a cgroup or runtime that names another pod is not believed, and
// the process's share goes with those of processes in no pod to the share
// with empty pod labels, served only when there is one.
func (c *Collector) shares(procs []gpu.Process, holders []metrics.PodRef) []metrics.Share {
	out := make([]metrics.Share, len(holders), len(holders)+1)
	index := make(map[metrics.PodRef]int, len(holders))
	for i, h := range holders {
		out[i] = metrics.Share{Pod: h}
		index[h] = i
	}
	var none metrics.Share
	hasNone := false
	for _, p := range procs {
		ref, reason := c.cfg.Processes.PodOf(p.PID)
		i, holds := index[ref]
		if reason == "" && !holds {
			reason = ReasonNotAssigned
		}
		s := &none
		if reason != "" {
			c.attribution.WithLabelValues(reason).Inc()
			hasNone = true
		} else {
			s = &out[i]
		}
		addProcess(s, p)
	}
	// Utilization is known for every holder or none: the driver samples
	// the whole GPU at once.
	anyUtil := false
	for _, p := range procs {
		anyUtil = anyUtil || p.HasUtil
	}
	for i := range out {
		out[i].HasUtil = anyUtil
		if !out[i].HasMemory && anyMemory(procs) {
			out[i].HasMemory = true
		}
	}
	if hasNone {
		none.Pod = metrics.PodRef{}
		out = append(out, none)
	}
	return out
}

func addProcess(s *metrics.Share, p gpu.Process) {
	if p.HasUtil {
		s.Util += p.SMUtil
		s.HasUtil = true
	}
	if p.HasMemory {
		s.MemoryMiB += p.UsedMemoryMiB
		s.HasMemory = true
	}
}

func anyMemory(procs []gpu.Process) bool {
	for _, p := range procs {
		if p.HasMemory {
			return true
		}
	}
	return false
}
