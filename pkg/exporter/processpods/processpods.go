// Package processpods names the pod of a GPU process, as dcgm-exporter's
// per-process attribution does: its /proc/<pid>/cgroup gives the pod UID and
// container ID (cgroup.go), and the container runtime's CRI index the pod's
// and container's names (runtime.go). A Resolver puts the two together; they
// must agree on the pod UID.
package processpods

import (
	"errors"

	"github.com/gpuscale/gpuscale/pkg/exporter"
	"github.com/gpuscale/gpuscale/pkg/metrics"
)

// ContainerIndex is the runtime's container index as a Resolver uses it
// (a *RuntimeIndex).
type ContainerIndex interface {
	Lookup(id string) (Container, bool)
}

// Resolver names a GPU process's pod: its cgroup gives the pod UID and
// container ID, the runtime the pod's and container's names. The two must
// agree on the pod UID.
type Resolver struct {
	Cgroups    CgroupReader
	Containers ContainerIndex
}

// PodOf names the pod of process pid, or gives the reason it cannot
// (exporter.Reason*).
func (p Resolver) PodOf(pid uint32) (metrics.PodRef, string) {
	c, err := p.Cgroups.ContainerOf(pid)
	switch {
	case errors.Is(err, ErrNotInPod):
		return metrics.PodRef{}, exporter.ReasonNotInPod
	case err != nil:
		return metrics.PodRef{}, exporter.ReasonNoCgroup
	}
	ctr, ok := p.Containers.Lookup(c.ID)
	if !ok {
		return metrics.PodRef{}, exporter.ReasonUnknownContainer
	}
	if ctr.PodUID != c.PodUID {
		return metrics.PodRef{}, exporter.ReasonPodMismatch
	}
	return metrics.PodRef{Namespace: ctr.Namespace, Pod: ctr.Pod, Container: ctr.Name}, ""
}
