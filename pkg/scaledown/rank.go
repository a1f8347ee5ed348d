package scaledown

import (
	"cmp"
	"container/heap"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscale/gpuscale/pkg/kube/podgroup"
)

// replica is what an HPA removes as one: a pod, or a LeaderWorkerSet group
// of a leader and its workers, which may span nodes.
type replica struct {
	namespace, name string // name orders a step's replicas (the slot)
	pods            []managedPod
	load            load
}

// replicasOf gathers managed pods into replicas. A group's load is its
// leader's, whose endpoint serves the group's requests; workers have none
// of their own, so a group whose leader is not managed has unknown load.
func replicasOf(managed []managedPod) []*replica {
	groups := map[podgroup.Group]*replica{}
	var out []*replica
	for _, mp := range managed {
		g, ok := podgroup.Of(mp.pod)
		if !ok {
			out = append(out, &replica{namespace: mp.pod.Namespace, name: mp.pod.Name, pods: []managedPod{mp}, load: mp.load})
			continue
		}
		r := groups[g]
		if r == nil {
			// "/" is in no pod name: a group never ties with a pod.
			r = &replica{namespace: g.Namespace, name: fmt.Sprintf("%s/%010d", g.Set, g.Index)}
			groups[g] = r
			out = append(out, r)
		}
		r.pods = append(r.pods, mp)
		if podgroup.IsLeader(mp.pod) {
			r.load = mp.load
		}
	}
	for _, r := range out {
		for i := range r.pods {
			r.pods[i].load = r.load
		}
	}
	return out
}

// rankReplicas gives every replica's pods the replica's deletion cost and
// returns them by cost. It empties nodes one at a time, and every replica
// with a pod on the node emptied takes the next rank, idlest first. The
// node emptied next is, among those with replicas left:
//
//   - one a scale-down can empty, whose GPU pods all belong to managed
//     replicas, before one holding other GPU pods;
//   - of those, the one with the fewest replicas to remove, then the
//     fewest GPU pods (for the others: the fewest GPU pods);
//   - then by name.
//
// Removing a replica of several nodes takes its pods off all of them, so
// the next node is chosen again among what is left: a group counts
// towards every node it frees. With one-pod replicas this is a fixed
// order of nodes.
func rankReplicas(reps []*replica, gpuPods map[string]int, res corev1.ResourceName) []managedPod {
	remaining := maps.Clone(gpuPods)
	units := map[string]int{}    // replicas left with a pod on the node
	blocked := map[string]bool{} // GPU pods of no managed replica there
	onNode := map[string][]*replica{}
	managedGPUPods := map[string]int{}
	for _, r := range reps {
		for _, n := range nodesOf(r) {
			onNode[n] = append(onNode[n], r)
			units[n]++
		}
		for _, mp := range r.pods {
			if PodGPUs(mp.pod, res) > 0 {
				managedGPUPods[mp.pod.Spec.NodeName]++
			}
		}
	}
	entry := func(n string) nodeEntry {
		return nodeEntry{node: n, blocked: blocked[n], units: units[n], remaining: remaining[n]}
	}
	q := &nodeQueue{}
	for n := range onNode {
		blocked[n] = remaining[n] > managedGPUPods[n]
		heap.Push(q, entry(n))
	}
	done := map[string]bool{}
	ranked := map[*replica]bool{}
	var out []managedPod
	rank := 0
	for q.Len() > 0 {
		e := heap.Pop(q).(nodeEntry)
		if done[e.node] || e != entry(e.node) {
			continue // emptied already, or a later entry holds its counts
		}
		done[e.node] = true
		var step []*replica
		for _, r := range onNode[e.node] {
			if !ranked[r] {
				ranked[r] = true
				step = append(step, r)
			}
		}
		if len(step) == 0 {
			continue
		}
		slices.SortFunc(step, func(a, b *replica) int {
			return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.namespace, b.namespace))
		})
		touched := map[string]bool{}
		for slot, r := range step {
			cost := rank*costStride + r.load.bucket()*bucketStride + min(slot, bucketStride-1)
			for i := range r.pods {
				r.pods[i].cost = cost
				out = append(out, r.pods[i])
				if n := r.pods[i].pod.Spec.NodeName; PodGPUs(r.pods[i].pod, res) > 0 {
					remaining[n]--
					touched[n] = true
				}
			}
			for _, n := range nodesOf(r) {
				units[n]--
				touched[n] = true
			}
		}
		for n := range touched {
			if !done[n] {
				heap.Push(q, entry(n))
			}
		}
		rank++
	}
	slices.SortStableFunc(out, func(a, b managedPod) int { return cmp.Compare(a.cost, b.cost) })
	return out
}

// nodesOf lists the nodes a replica's pods run on, each once.
func nodesOf(r *replica) []string {
	var out []string
	for _, mp := range r.pods {
		if n := mp.pod.Spec.NodeName; !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// nodeEntry is a node and its counts when it was queued.
type nodeEntry struct {
	node      string
	blocked   bool // holds GPU pods of no managed replica
	units     int  // replicas left with a pod on it
	remaining int  // GPU pods left on it
}

// nodeQueue is a min-heap of nodes in the order rankReplicas empties them.
type nodeQueue []nodeEntry

func (q nodeQueue) Len() int { return len(q) }
func (q nodeQueue) Less(i, j int) bool {
	a, b := q[i], q[j]
	if a.blocked != b.blocked {
		return !a.blocked
	}
	c := cmp.Compare(a.remaining, b.remaining)
	if !a.blocked {
		c = cmp.Or(cmp.Compare(a.units, b.units), c)
	}
	return cmp.Or(c, cmp.Compare(a.node, b.node)) < 0
}
func (q nodeQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *nodeQueue) Push(x any)   { *q = append(*q, x.(nodeEntry)) }
func (q *nodeQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}
