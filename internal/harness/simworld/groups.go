package simworld

import (
	"github.com/gpuscale/gpuscale/pkg/exporter/backend/sim"
	"github.com/gpuscale/gpuscale/pkg/kube/podgroup"
)

// groupGPU is one GPU held by a worker of a LeaderWorkerSet group, and the
// exporter of its node.
type groupGPU struct {
	exporter, node string
	index          int
}

// workerGPUsLocked lists the GPUs held by the workers of the group whose
// leader is k, on nodes with a running exporter. A multi-node model
// instance runs its layers on every pod of its group: the workers' GPUs
// are as busy as the leader's, whose server the World simulates.
func (w *World) workerGPUsLocked(k podKey, exporters map[string]string) []groupGPU {
	if w.pods == nil {
		return nil
	}
	leader, err := w.pods.Pods(k.Namespace).Get(k.Name)
	if err != nil || leader.UID != k.UID || !podgroup.IsLeader(leader) {
		return nil
	}
	g, _ := podgroup.Of(leader)
	members, err := w.pods.Pods(k.Namespace).List(g.Selector())
	if err != nil {
		return nil
	}
	var out []groupGPU
	for _, p := range members {
		addr, ok := exporters[p.Spec.NodeName]
		if p.UID == leader.UID || !ok {
			continue
		}
		for _, idx := range w.gpus[p.Spec.NodeName][keyOf(p)] {
			for _, i := range idx {
				out = append(out, groupGPU{exporter: addr, node: p.Spec.NodeName, index: i})
			}
		}
	}
	return out
}

// workerUpdates sets the workers' GPUs to the leader's load.
func workerUpdates(gpus []groupGPU, l sim.Load) []gpuUpdate {
	out := make([]gpuUpdate, 0, len(gpus))
	for _, g := range gpus {
		out = append(out, gpuUpdate{exporter: g.exporter, uuid: sim.GPUUUID(g.node, g.index), load: l})
	}
	return out
}
