package app

import (
	"errors"

	"github.com/gpuscale/gpuscale/pkg/cricontainers"
	"github.com/gpuscale/gpuscale/pkg/exporter"
	"github.com/gpuscale/gpuscale/pkg/metrics"
	"github.com/gpuscale/gpuscale/pkg/proccgroup"
)

// containerIndex is the runtime's container index as processPods uses it.
type containerIndex interface {
	Lookup(id string) (cricontainers.Container, bool)
}

// processPods names a GPU process's pod: its cgroup gives the pod UID and
// container ID, the runtime the pod's and container's names. The two must
// agree on the pod UID.
type processPods struct {
	cgroups    proccgroup.Reader
	containers containerIndex
}

func (p processPods) PodOf(pid uint32) (metrics.PodRef, string) {
	c, err := p.cgroups.ContainerOf(pid)
	switch {
	case errors.Is(err, proccgroup.ErrNotInPod):
		return metrics.PodRef{}, exporter.ReasonNotInPod
	case err != nil:
		return metrics.PodRef{}, exporter.ReasonNoCgroup
	}
	ctr, ok := p.containers.Lookup(c.ID)
	if !ok {
		return metrics.PodRef{}, exporter.ReasonUnknownContainer
	}
	if ctr.PodUID != c.PodUID {
		return metrics.PodRef{}, exporter.ReasonPodMismatch
	}
	return metrics.PodRef{Namespace: ctr.Namespace, Pod: ctr.Pod, Container: ctr.Name}, ""
}
