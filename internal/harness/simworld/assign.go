package simworld

import (
	"cmp"
	"slices"
	"time"
)

// gpuRequest is one pod's claim on a node's GPUs, in the order the device
// plugin sees its containers.
type gpuRequest struct {
	Pod        podKey
	Created    time.Time
	Containers []containerRequest
}

// containerRequest is the number of GPUs one container asks for.
type containerRequest struct {
	Name string
	GPUs int
}

// allocation maps a container name to the GPU indexes it holds.
type allocation map[string][]int

// assignGPUs hands out a node's GPUs the way a device plugin would. Pods in
// prev that still appear in reqs keep their allocation, however the
// requests changed (a running container's devices never move). The others
// are served in (creation time, namespace, name) order, each container
// taking the lowest free indexes. A pod whose whole request does not fit
// gets nothing this time and is tried again on the next call, so one pod
// never holds part of what it needs. Pods requesting no GPU are left out.
func assignGPUs(prev map[podKey]allocation, reqs []gpuRequest, gpus int) map[podKey]allocation {
	out := make(map[podKey]allocation, len(reqs))
	used := make([]bool, gpus)
	var pending []gpuRequest
	for _, r := range reqs {
		a, ok := prev[r.Pod]
		if !ok {
			pending = append(pending, r)
			continue
		}
		out[r.Pod] = a
		for _, idx := range a {
			for _, i := range idx {
				if i >= 0 && i < gpus {
					used[i] = true
				}
			}
		}
	}
	slices.SortFunc(pending, func(a, b gpuRequest) int {
		return cmp.Or(a.Created.Compare(b.Created),
			cmp.Compare(a.Pod.Namespace, b.Pod.Namespace),
			cmp.Compare(a.Pod.Name, b.Pod.Name),
			cmp.Compare(a.Pod.UID, b.Pod.UID))
	})
	for _, r := range pending {
		if a := allocate(r, used); a != nil {
			out[r.Pod] = a
		}
	}
	return out
}

// allocate gives r's containers the lowest free indexes in used, marking
// them taken, or returns nil and leaves used alone if they do not all fit
// or r asks for nothing.
func allocate(r gpuRequest, used []bool) allocation {
	want := 0
	for _, c := range r.Containers {
		want += max(c.GPUs, 0)
	}
	var free []int
	for i, u := range used {
		if !u && len(free) < want {
			free = append(free, i)
		}
	}
	if want == 0 || len(free) < want {
		return nil
	}
	a := make(allocation, len(r.Containers))
	for _, c := range r.Containers {
		if c.GPUs <= 0 {
			continue
		}
		a[c.Name], free = free[:c.GPUs:c.GPUs], free[c.GPUs:]
		for _, i := range a[c.Name] {
			used[i] = true
		}
	}
	return a
}
