package provider

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// PodSet is the Ready pods one API call asks about. The provider builds it
// from the informer cache and, while no pod of the namespace changes,
// hands the same set to every call with the same label selector, so a
// Values source may keep what it derives from the set (Memo) instead of
// deriving it on every call. A PodSet is never modified once built.
type PodSet struct {
	// Namespace is the namespace of every pod, "" when they span several.
	Namespace string
	// Pods are the Ready pods, in no particular order. They are the
	// informer's objects: read them, never modify them.
	Pods []*corev1.Pod
	// names are the pods' names, copied while the pods are listed: at
	// 10,000 pods, reading each pod object again later is a cache miss
	// per pod.
	names []string
	// gen is the generation of the pods it was built from: of the pods
	// that carry the label dep when byLabel, else of the namespace's.
	gen     uint64
	dep     labelPair
	byLabel bool
	// src is the generation gen was read from (nil when neither the
	// namespace's pods nor the label's existed): checking it is a
	// pointer read, where looking it up again cost most of evicting a set
	// among 1,024. A table or label dropped moves its generation on first,
	// so a set of one never looks current.
	src  *generation
	memo sync.Map
	// While it is kept: key is its key, cost what keeping it is taken to
	// cost (podSetCost), and newer and older its neighbours in the order
	// of use, [all] among all sets and [inNS] among its namespace's.
	key          podSetKey
	cost         int64
	newer, older [2]*PodSet
}

// NewPodSet returns a set of pods that the caller has already filtered
// (all Ready, all in namespace unless namespace is "").
func NewPodSet(namespace string, pods []*corev1.Pod) *PodSet {
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Name
	}
	return &PodSet{Namespace: namespace, Pods: pods, names: names}
}

// Names returns the pods' names, aligned with Pods. The caller must not
// modify the slice.
func (s *PodSet) Names() []string { return s.names }

// MemoKey names one thing a Values source derives from a PodSet, and its
// type. Keys compare by identity: each NewMemoKey is a key of its own.
// What is memoised must depend on the set's namespace and names only: a
// set rebuilt after a pod change with the same names in the same order
// starts with its predecessor's memos.
type MemoKey[T any] struct{ name string }

// NewMemoKey returns a key; name only helps debugging.
func NewMemoKey[T any](name string) *MemoKey[T] { return &MemoKey[T]{name: name} }

// Memo returns what build returned for key the first time it was asked
// for set. build may run more than once when calls race; only one result
// is kept.
func Memo[T any](set *PodSet, key *MemoKey[T], build func() T) T {
	if v, ok := set.memo.Load(key); ok {
		return v.(T)
	}
	v, _ := set.memo.LoadOrStore(key, build())
	return v.(T)
}
