package scaledown

import (
	"cmp"
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// A deletion cost is nodeRank*costStride + loadBucket*bucketStride + slot.
// Every pod of a node ranks below every pod of the next node; within a
// node, idler buckets first; slot (the pod's place by name among the
// node's managed pods) makes costs distinct. A pod's cost only changes
// when its node's rank, its own load bucket or its node's membership
// changes, never because a neighbour's load moved: under churn that is
// what keeps patches few. Costs stay within int32 up to 214,748 nodes.
const (
	costStride    = 10000
	bucketStride  = 500 // slots per bucket: more managed pods than this on one node share the last slot
	unknownBucket = costStride/bucketStride - 1
)

// nodeView is one GPU node as the cluster autoscaler rates it.
type nodeView struct {
	name        string
	allocatable int64 // GPUs
	requested   int64 // GPUs requested by the node's active pods
	gpuPods     int   // pods requesting GPUs, not terminating
	blocked     [len(blockReasons)]int
}

// utilization is requested over allocatable GPUs, which is how the
// cluster autoscaler rates a GPU node (CPU and memory are ignored there).
func (v *nodeView) utilization() float64 {
	if v.allocatable == 0 {
		return 0
	}
	return float64(v.requested) / float64(v.allocatable)
}

func (v *nodeView) isBlocked() bool {
	for _, n := range v.blocked {
		if n > 0 {
			return true
		}
	}
	return false
}

// load is a replica's busyness, if a fresh sample says so: requests in
// flight (queued plus running) and the share of its KV cache in use.
// Unknown is never taken for idle.
type load struct {
	value float64 // requests queued and running
	known bool
	// kv is the KV cache in use in percent (inference_kv_cache_utilization),
	// when kvKnown; servers without a KV gauge rank by their requests
	// alone.
	kv      float64
	kvKnown bool
}

// Load tiers. A bucket is inflightTier*kvTiers + kvTier: requests in flight
// first, the KV cache in use within a tier.
const (
	inflightTiers = 5 // 0, 1-3, 4-15, 16-63, 64 and more
	kvTiers       = 3 // under a third, under two thirds, more
)

// bucket coarsens a load so that the replica whose removal cuts the least
// work ranks first: requests in flight on a base-4 log scale (0, 1-3,
// 4-15, 16-63, 64+), then the KV cache in use in thirds (the context the
// requests have built up, which a cut stream loses). Going from 0 to 1
// request in flight matters when choosing whom to remove, 5 or 9 does
// not, and every reordering costs a patch: a load is seconds old by the
// time a cost is read, so finer order would be noise. Unknown load sorts
// after every known one.
func (l load) bucket() int {
	if !l.known {
		return unknownBucket
	}
	tier := 0
	if l.value >= 1 {
		tier = min(1+int(math.Log2(l.value)/2), inflightTiers-1)
	}
	kv := 0
	if l.kvKnown {
		kv = min(max(int(l.kv*kvTiers/100), 0), kvTiers-1)
	}
	return tier*kvTiers + kv
}

// managedPod is a managed pod on a node with the cost it should carry.
type managedPod struct {
	pod  *corev1.Pod
	load load // its replica's: a group's is its leader's
	cost int
}

// plan is what one reconcile computed from the caches.
type plan struct {
	nodes   []*nodeView  // GPU nodes, by name
	managed []managedPod // managed pods on nodes, by cost
}

// buildPlan rates the GPU nodes and gives every managed pod on a node its
// deletion cost. Replicas are ranked, not pods: a LeaderWorkerSet group is
// one replica, all its pods share one cost (rank.go). Nodes holding the
// fewest GPU pods (managed or not) are emptied first, equally full nodes
// by name, so that one node's replicas all go before the next node's;
// within a node the idlest replicas rank lowest.
func buildPlan(pods []*corev1.Pod, nodes []*corev1.Node, res corev1.ResourceName, loadOf func(*corev1.Pod) load) plan {
	var out plan
	views := gpuNodeViews(nodes, res)
	for _, v := range views {
		out.nodes = append(out.nodes, v)
	}
	slices.SortFunc(out.nodes, func(a, b *nodeView) int { return cmp.Compare(a.name, b.name) })

	gpuPods := map[string]int{}
	var managed []managedPod
	for _, p := range pods {
		if !active(p) {
			continue
		}
		g := PodGPUs(p, res)
		leaving := p.DeletionTimestamp != nil
		if v := views[p.Spec.NodeName]; v != nil {
			v.requested += g // the autoscaler counts terminating pods too
			if r, ok := blockReason(p); ok {
				v.blocked[reasonIndex(r)]++
			}
			if g > 0 && !leaving {
				v.gpuPods++
			}
		}
		if g > 0 && !leaving {
			gpuPods[p.Spec.NodeName]++
		}
		if isManaged(p) && !leaving {
			managed = append(managed, managedPod{pod: p, load: loadOf(p)})
		}
	}
	out.managed = rankReplicas(replicasOf(managed), gpuPods, res)
	return out
}

// gpuNodeViews returns an empty view of every node with allocatable GPUs.
func gpuNodeViews(nodes []*corev1.Node, res corev1.ResourceName) map[string]*nodeView {
	views := map[string]*nodeView{}
	for _, n := range nodes {
		if g := nodeGPUs(n, res); g > 0 {
			v := &nodeView{name: n.Name, allocatable: g}
			if n.Annotations[ScaleDownDisabledAnnotation] == "true" {
				v.blocked[reasonIndex(ReasonScaleDownDisabled)] = 1
			}
			views[n.Name] = v
		}
	}
	return views
}

func reasonIndex(r string) int {
	return slices.Index(blockReasons[:], r)
}

// LoadRank is the rank the controller gives a replica among those of its
// node by its load: requests in flight (queued plus running) and the KV
// cache in use, in percent (negative: unknown). Lower ranks cost less and
// go first; replicas of one rank go by name. Simulations that choose
// victims as the controller's costs make a ReplicaSet choose them use it.
func LoadRank(inflight, kvPercent float64) int {
	return load{value: inflight, known: true, kv: kvPercent, kvKnown: kvPercent >= 0}.bucket()
}
