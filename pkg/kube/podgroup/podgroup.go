// Package podgroup tells which pods make up one replica of a model served
// across several pods: a LeaderWorkerSet group, a leader and its workers,
// which an HPA scales as one unit through the LeaderWorkerSet's scale
// subresource. The leader serves the group's API and metrics endpoint; the
// workers hold GPUs of the same model instance. gpuscale attributes a
// group's signals to the group (pkg/provider), bills its GPUs together and
// ranks groups, not pods, for scale-down (pkg/scaledown).
//
// A group is named by the labels LeaderWorkerSet puts on every pod it
// creates. Labels are the pod author's to write, so a group is only ever
// a set of pods in one namespace: a pod can join a group of its own
// namespace and nothing else.
package podgroup

import (
	"cmp"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// LeaderWorkerSet's pod labels (leaderworkerset.x-k8s.io/v1).
const (
	// SetLabel names the LeaderWorkerSet.
	SetLabel = "leaderworkerset.sigs.k8s.io/name"
	// GroupIndexLabel is the group's index in the set (0 .. replicas-1).
	GroupIndexLabel = "leaderworkerset.sigs.k8s.io/group-index"
	// WorkerIndexLabel is the pod's index in its group; the leader is 0.
	WorkerIndexLabel = "leaderworkerset.sigs.k8s.io/worker-index"
)

// Group names one group.
type Group struct {
	Namespace, Set string
	Index          int
}

// Of returns the group p belongs to, false for a pod of no group.
func Of(p *corev1.Pod) (Group, bool) {
	// A pod of no set returns before the index is parsed: strconv's error
	// for a missing index allocates, and a 10,000-pod GPU list asks this
	// of every pod (17% of its CPU in the PromQL source's profile).
	set := p.Labels[SetLabel]
	if set == "" {
		return Group{}, false
	}
	idx, err := strconv.Atoi(p.Labels[GroupIndexLabel])
	if err != nil || idx < 0 {
		return Group{}, false
	}
	return Group{Namespace: p.Namespace, Set: set, Index: idx}, true
}

// IsLeader reports whether p leads its group: the pod whose endpoint
// serves the group's requests and metrics.
func IsLeader(p *corev1.Pod) bool {
	_, ok := Of(p)
	return ok && p.Labels[WorkerIndexLabel] == "0"
}

// Selector selects the pods of g in its namespace.
func (g Group) Selector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{SetLabel: g.Set, GroupIndexLabel: strconv.Itoa(g.Index)})
}

// String is namespace/set/index.
func (g Group) String() string { return g.Namespace + "/" + g.Set + "/" + strconv.Itoa(g.Index) }

// Compare orders groups by namespace, set and index.
func Compare(a, b Group) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Set, b.Set), cmp.Compare(a.Index, b.Index))
}
