package podresources

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// PodRef is one container that holds a device.
type PodRef struct {
	Namespace string
	Pod       string
	Container string
}

// Assignments maps a device ID (a GPU UUID "GPU-..." or a MIG device UUID
// "MIG-...") to the containers holding it, sorted by (Namespace, Pod,
// Container), without duplicates. A device that no container holds has no
// entry.
//
// An Assignments returned by Watcher.Assignments is shared with other readers
// and must not be modified.
type Assignments map[string][]PodRef

// comparePodRef orders PodRefs by (Namespace, Pod, Container) so that the
// output does not depend on the order in which the kubelet lists pods.
func comparePodRef(a, b PodRef) int {
	return cmp.Or(
		cmp.Compare(a.Namespace, b.Namespace),
		cmp.Compare(a.Pod, b.Pod),
		cmp.Compare(a.Container, b.Container),
	)
}

// buildAssignments turns a List response into Assignments, keeping only the
// devices whose resource name matches one of patterns (see matchResource).
// It relies on the nil-safe protobuf getters, so a sparse or partly nil
// response cannot make it panic.
func buildAssignments(resp *podresourcesv1.ListPodResourcesResponse, patterns []string) Assignments {
	// A set per device deduplicates both the replicas of a time-sliced GPU
	// handed to one container and a pod listed twice.
	holders := make(map[string]map[PodRef]struct{})
	for _, pod := range resp.GetPodResources() {
		for _, ctr := range pod.GetContainers() {
			ref := PodRef{Namespace: pod.GetNamespace(), Pod: pod.GetName(), Container: ctr.GetName()}
			for _, dev := range ctr.GetDevices() {
				if !matchResource(patterns, dev.GetResourceName()) {
					continue
				}
				for _, id := range dev.GetDeviceIds() {
					id = normalizeDeviceID(id)
					if id == "" {
						continue
					}
					refs, ok := holders[id]
					if !ok {
						refs = make(map[PodRef]struct{}, 1)
						holders[id] = refs
					}
					refs[ref] = struct{}{}
				}
			}
		}
	}

	out := make(Assignments, len(holders))
	for id, refs := range holders {
		out[id] = slices.SortedFunc(maps.Keys(refs), comparePodRef)
	}
	return out
}

// matchResource reports whether name matches one of patterns. A pattern that
// ends in "*" matches every name with the part before the "*" as prefix; any
// other pattern must match exactly.
func matchResource(patterns []string, name string) bool {
	if name == "" {
		return false
	}
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		} else if name == p {
			return true
		}
	}
	return false
}

// normalizeDeviceID strips the replica suffix "::<n>" that the NVIDIA device
// plugin appends when it shares one GPU between pods (time-slicing, MPS), so
// that every replica maps to the UUID the GPU metrics are keyed by. IDs
// without a numeric suffix are returned unchanged.
func normalizeDeviceID(id string) string {
	i := strings.LastIndex(id, "::")
	if i <= 0 {
		return id
	}
	replica := id[i+2:]
	if replica == "" || strings.IndexFunc(replica, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
		return id
	}
	return id[:i]
}
