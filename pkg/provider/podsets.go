package provider

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// PodEvents is where the provider learns that pods changed: the pod
// informer whose lister it reads.
type PodEvents interface {
	AddEventHandler(cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error)
}

// Bounds on the memoised sets. There is one per namespace and label
// selector asked about, about one per HPA; but anyone allowed to list a
// namespace's metrics chooses selectors, and each set holds its pods (1,024
// sets over 10,000 pods were 281 MiB, 256 selectors of 512 KiB 130 MiB). So
// a namespace's sets are bounded in number and size, all sets too, and a
// selector past maxKeptSelector is answered afresh every time instead of
// kept. Past a bound, sets that pod changes made useless go first (of the
// few least recently used), then the least recently used: the namespace's
// own for its bounds, anyone's for the total. A set dropped costs a
// rebuild on the next call, never a wrong or missing answer.
const (
	maxPodSets             = 1024
	maxPodSetsPerNamespace = 128
	maxPodSetBytes         = 32 << 20
	maxPodSetBytesPerNS    = 4 << 20
	maxKeptSelector        = 1 << 10
	// podSetBytesPerPod is a set's pod pointer and name, and the store
	// slot a Values source memoises per pod (measured: 27 bytes).
	podSetBytesPerPod = 32
	podSetOverhead    = 512
)

// podSetCost is what keeping set under key is taken to cost.
func podSetCost(key podSetKey, set *PodSet) int64 {
	return int64(podSetBytesPerPod*len(set.Pods) + len(key.selector) + len(key.namespace) + len(set.dep.key) + len(set.dep.value) + podSetOverhead)
}

// podSets lists the Ready pods of a namespace that match a selector, and
// keeps each answer until a pod of that namespace is added, changed or
// deleted. The HPA asks the same question every 15 seconds, and at 10,000
// pods listing them from the informer cache and checking each one's
// readiness was most of the call's cost. Once it hears of pod changes it
// also keeps its own table of each namespace's pods with their readiness,
// so that rebuilding a list after a change is one pass over an array
// rather than a lookup of every pod in the informer's index.
type podSets struct {
	lister corelisters.PodLister

	// tracking is false until the provider hears of pod changes and has
	// heard of every pod the informer had listed (its handler's
	// HasSynced, synced until then): before, the tables miss pods, and
	// nothing may be read from them or reused.
	tracking atomic.Bool
	synced   func() bool

	mu sync.Mutex
	// tables are the pods of each namespace, as the events told them.
	tables map[string]*podTable
	// changes counts every change; a namespace's table takes the count at
	// its latest change as its generation, so generations are unique
	// across namespaces, even one deleted and created again.
	changes uint64
	sets    map[podSetKey]*PodSet
	// kept is what the sets cost, in all and by namespace (count, bytes),
	// and their order of use.
	kept keptSets
	byNS map[string]*keptSets
}

// keptSets are sets kept, most recently used first: all sets in
// podSets.kept (links [all]), one namespace's in podSets.byNS ([inNS]).
// Finding the least recently used is then one step, where a pass over
// 1,024 sets cost most of a Pods list once 1,000 HPAs' selectors of one
// namespace took turns past its bound.
type keptSets struct {
	n            int
	bytes        int64
	newest, last *PodSet
}

// Which links of a PodSet a keptSets orders.
const (
	all  = 0
	inNS = 1
)

func (k *keptSets) push(set *PodSet, l int) {
	set.older[l], set.newer[l] = k.newest, nil
	if k.newest != nil {
		k.newest.newer[l] = set
	} else {
		k.last = set
	}
	k.newest = set
}

func (k *keptSets) unlink(set *PodSet, l int) {
	if set.newer[l] != nil {
		set.newer[l].older[l] = set.older[l]
	} else {
		k.newest = set.older[l]
	}
	if set.older[l] != nil {
		set.older[l].newer[l] = set.newer[l]
	} else {
		k.last = set.newer[l]
	}
	set.newer[l], set.older[l] = nil, nil
}

// usedLocked marks a kept set used now.
func (s *podSets) usedLocked(set *PodSet) {
	s.kept.unlink(set, all)
	s.kept.push(set, all)
	if ns := s.byNS[set.key.namespace]; ns != nil {
		ns.unlink(set, inNS)
		ns.push(set, inNS)
	}
}

type podSetKey struct{ namespace, selector string }

func newPodSets(lister corelisters.PodLister) *podSets {
	return &podSets{lister: lister, tables: map[string]*podTable{}, sets: map[podSetKey]*PodSet{}, byNS: map[string]*keptSets{}}
}

// track subscribes to pod changes, after which sets are reused.
func (s *podSets) track(events PodEvents) error {
	reg, err := events.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.put(obj) },
		UpdateFunc: s.updated,
		DeleteFunc: s.deleted,
	})
	if err != nil {
		return fmt.Errorf("watch pods: %w", err)
	}
	s.mu.Lock()
	s.synced = func() bool { return true }
	if reg != nil {
		s.synced = reg.HasSynced
	}
	s.mu.Unlock()
	return nil
}

// live reports whether the tables hold every pod (see tracking). Once
// they do, they keep doing so.
func (s *podSets) live() bool {
	if s.tracking.Load() {
		return true
	}
	s.mu.Lock()
	synced := s.synced
	s.mu.Unlock()
	// Asked outside s.mu: the handler it reports on takes s.mu.
	if synced == nil || !synced() {
		return false
	}
	s.tracking.Store(true)
	return true
}

// updated ignores the informer's resyncs, which change nothing.
func (s *podSets) updated(old, cur any) {
	o, ok1 := old.(*corev1.Pod)
	c, ok2 := cur.(*corev1.Pod)
	if ok1 && ok2 && o.ResourceVersion == c.ResourceVersion && o.ResourceVersion != "" {
		return
	}
	s.put(cur)
}

func (s *podSets) put(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tables[pod.Namespace]
	if t == nil {
		t = &podTable{gen: &generation{}, slots: map[string]int32{}, byLabel: map[labelPair]*posting{}}
		s.tables[pod.Namespace] = t
	}
	s.changes++
	t.gen.n = s.changes
	if i, ok := t.slots[pod.Name]; ok {
		t.unindex(t.pods[i].Labels, i, s.changes)
		t.pods[i], t.ready[i] = pod, podReady(pod)
		t.index(pod.Labels, i, s.changes)
		return
	}
	i := int32(len(t.pods))
	t.slots[pod.Name] = i
	t.pods = append(t.pods, pod)
	t.ready = append(t.ready, podReady(pod))
	t.index(pod.Labels, i, s.changes)
}

func (s *podSets) deleted(obj any) {
	var ns, name string
	switch o := obj.(type) {
	case *corev1.Pod:
		ns, name = o.Namespace, o.Name
	case cache.DeletedFinalStateUnknown:
		ns, name, _ = cache.SplitMetaNamespaceKey(o.Key)
	default:
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.changes++
	t := s.tables[ns]
	i, ok := t.slot(name)
	if !ok {
		return
	}
	t.gen.n = s.changes
	last := len(t.pods) - 1
	delete(t.slots, name)
	t.unindex(t.pods[i].Labels, i, s.changes)
	if int(i) != last {
		t.pods[i], t.ready[i] = t.pods[last], t.ready[last]
		t.slots[t.pods[i].Name] = i
		t.moved(t.pods[i].Labels, int32(last), i)
	}
	t.pods[last] = nil
	t.pods, t.ready = t.pods[:last], t.ready[:last]
	if last == 0 {
		// An absent table is generation 0, which only the empty sets
		// built while it was absent carry.
		delete(s.tables, ns)
	}
}

// genLocked returns the generation that sets of namespace depend on.
func (s *podSets) genLocked(namespace string) uint64 {
	if namespace == "" {
		return s.changes
	}
	if t := s.tables[namespace]; t != nil {
		return t.gen.n
	}
	return 0
}

// currentLocked reports whether no pod that set depends on changed since
// it was built.
func (s *podSets) currentLocked(namespace string, set *PodSet) bool {
	if set.src != nil {
		return set.src.n == set.gen
	}
	if !set.byLabel {
		return set.gen == s.genLocked(namespace)
	}
	var gen uint64
	if t := s.tables[namespace]; t != nil {
		if p := t.byLabel[set.dep]; p != nil {
			gen = p.gen.n
		}
	}
	return set.gen == gen
}

// get returns the Ready pods of namespace ("" for all) that selector
// matches.
func (s *podSets) get(namespace string, selector labels.Selector) (*PodSet, error) {
	key := podSetKey{namespace, selector.String()}
	if !s.live() || namespace == "" {
		return s.listed(namespace, selector, key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.sets[key]
	if old != nil && s.currentLocked(namespace, old) {
		s.usedLocked(old)
		return old, nil
	}
	set := &PodSet{Namespace: namespace}
	t := s.tables[namespace]
	set.dep, set.byLabel, set.src = t.match(selector, func(n int) {
		set.Pods, set.names = make([]*corev1.Pod, 0, n), make([]string, 0, n)
	}, func(i int32) {
		if t.ready[i] {
			set.Pods = append(set.Pods, t.pods[i])
			set.names = append(set.names, t.pods[i].Name)
		}
	})
	if set.src != nil {
		set.gen = set.src.n
	}
	if old != nil && slices.Equal(old.names, set.names) {
		// The change left the same Ready pods in the same order (most
		// pod updates: a status heartbeat, a restart count, a label the
		// selector does not read), so what sources derived from the
		// names still holds: a store source's lookup and its quantile
		// memos, which a new set would otherwise rebuild cold.
		old.memo.Range(func(k, v any) bool {
			set.memo.Store(k, v)
			return true
		})
	}
	s.keepLocked(key, set)
	return set, nil
}

// matching returns every pod of namespace that selector matches, Ready or
// not, from the pods the events told of: what an Object read of a workload
// needs. ok is false until those are all the pods (live), and the caller
// then lists them from the informer cache. The answer is not kept: built
// from the pods of the label the selector requires, it costs what the
// workload's pods cost.
func (s *podSets) matching(namespace string, selector labels.Selector) (pods []*corev1.Pod, ok bool) {
	if !s.live() {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tables[namespace]
	t.match(selector, func(n int) { pods = make([]*corev1.Pod, 0, n) }, func(i int32) { pods = append(pods, t.pods[i]) })
	return pods, true
}

// listed builds a set from the informer cache: before the provider hears
// of changes, and for lists across namespaces, which the HPA never asks
// for. Such sets are kept (when tracking) under the count of all changes.
func (s *podSets) listed(namespace string, selector labels.Selector, key podSetKey) (*PodSet, error) {
	tracking := s.live()
	s.mu.Lock()
	gen := s.changes
	if set := s.sets[key]; tracking && set != nil && !set.byLabel && set.gen == gen {
		s.usedLocked(set)
		s.mu.Unlock()
		return set, nil
	}
	s.mu.Unlock()
	// The count is read before listing: a change that lands during the
	// list makes the set look older than it is, never newer.
	pods, err := s.lister.Pods(namespace).List(selector)
	if err != nil {
		return nil, err
	}
	set := NewPodSet(namespace, readyPods(pods))
	set.gen = gen
	if tracking {
		s.mu.Lock()
		s.keepLocked(key, set)
		s.mu.Unlock()
	}
	return set, nil
}

func (s *podSets) keepLocked(key podSetKey, set *PodSet) {
	cur := s.sets[key]
	if cur != nil && cur.src == set.src && cur.byLabel == set.byLabel && cur.dep == set.dep && cur.gen >= set.gen {
		return
	}
	cost := podSetCost(key, set)
	if len(key.selector) > maxKeptSelector || cost > maxPodSetBytesPerNS {
		return
	}
	if cur != nil {
		s.dropLocked(key, cur)
	}
	for ns := s.byNS[key.namespace]; ns != nil && (ns.n >= maxPodSetsPerNamespace || ns.bytes+cost > maxPodSetBytesPerNS); ns = s.byNS[key.namespace] {
		s.evictLocked(ns, inNS)
	}
	for s.kept.n > 0 && (s.kept.n >= maxPodSets || s.kept.bytes+cost > maxPodSetBytes) {
		s.evictLocked(&s.kept, all)
	}
	set.key, set.cost = key, cost
	s.sets[key] = set
	ns := s.byNS[key.namespace]
	if ns == nil {
		ns = &keptSets{}
		s.byNS[key.namespace] = ns
	}
	ns.n++
	ns.bytes += cost
	ns.push(set, inNS)
	s.kept.n++
	s.kept.bytes += cost
	s.kept.push(set, all)
}

// staleScan is how many of the least recently used sets eviction looks
// at for one that pod changes made useless.
const staleScan = 8

// evictLocked drops one set of k (not empty), which orders them by links
// l: among its staleScan least recently used, one that pod changes made
// useless if there is one, else the least recently used.
func (s *podSets) evictLocked(k *keptSets, l int) {
	victim := k.last
	for set, i := k.last, 0; set != nil && i < staleScan; set, i = set.newer[l], i+1 {
		if !s.currentLocked(set.key.namespace, set) {
			victim = set
			break
		}
	}
	s.dropLocked(victim.key, victim)
}

func (s *podSets) dropLocked(key podSetKey, set *PodSet) {
	delete(s.sets, key)
	s.kept.n--
	s.kept.bytes -= set.cost
	s.kept.unlink(set, all)
	if ns := s.byNS[key.namespace]; ns != nil {
		ns.n--
		ns.bytes -= set.cost
		ns.unlink(set, inNS)
		if ns.n <= 0 {
			delete(s.byNS, key.namespace)
		}
	}
}
