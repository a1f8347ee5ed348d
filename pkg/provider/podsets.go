package provider

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
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

// podTable is one namespace's pods. Slots are dense: a deleted pod's slot
// is taken by the last one.
//
// byLabel indexes the slots by label, so that a selector that requires a
// label (a workload's selector does) is answered from the pods that carry
// it rather than from all the namespace's: with 1,000 Deployments in one
// namespace, matching each pod of the namespace against the selector was
// most of each HPA call's cost. Each label also has its own generation, so
// a set built from a label's pods stays current while pods without it
// change. The index is the size of the pods' labels, which those who may
// create pods choose, not readers: 10,000 pods with one label of their own
// each (a StatefulSet's pod-name) and two shared grew the heap by 2.6 MiB.
type podTable struct {
	gen     *generation
	slots   map[string]int32
	pods    []*corev1.Pod
	ready   []bool
	byLabel map[labelPair]*posting
}

// labelPair is one label, key and value.
type labelPair struct{ key, value string }

// posting is the slots of the pods that carry one label, and the count of
// changes at the latest change to any pod that carries it or carried it.
type posting struct {
	gen   *generation
	slots map[int32]struct{}
}

// generation is the count of changes at the latest change to some pods.
// It is its own small object so that a set can point at it without
// keeping the pods' table or index alive.
type generation struct{ n uint64 }

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

// index files slot i under each of lbl, unindex takes it out; both mark
// each label changed at gen.
func (t *podTable) index(lbl map[string]string, i int32, gen uint64) {
	for k, v := range lbl {
		l := labelPair{k, v}
		p := t.byLabel[l]
		if p == nil {
			p = &posting{gen: &generation{}, slots: map[int32]struct{}{}}
			t.byLabel[l] = p
		}
		p.slots[i] = struct{}{}
		p.gen.n = gen
	}
}

func (t *podTable) unindex(lbl map[string]string, i int32, gen uint64) {
	for k, v := range lbl {
		l := labelPair{k, v}
		p := t.byLabel[l]
		if p == nil {
			continue
		}
		delete(p.slots, i)
		p.gen.n = gen
		if len(p.slots) == 0 {
			// An absent label is generation 0, which only the empty
			// sets built while it was absent carry.
			delete(t.byLabel, l)
		}
	}
}

// moved refiles the pod of slot from under its labels as slot to; the pod
// did not change, so neither do the labels' generations.
func (t *podTable) moved(lbl map[string]string, from, to int32) {
	for k, v := range lbl {
		if p := t.byLabel[labelPair{k, v}]; p != nil {
			delete(p.slots, from)
			p.slots[to] = struct{}{}
		}
	}
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

func (t *podTable) slot(name string) (int32, bool) {
	if t == nil {
		return 0, false
	}
	i, ok := t.slots[name]
	return i, ok
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

// match calls fn with the slot of each pod of t (nil: none) that selector
// matches, in slot order, after telling grow how many pods it will look
// at, and returns what the answer depends on: the pods
// of the label dep when byLabel, else all the namespace's, and their
// generation (nil when there are none).
//
// A selector that requires a label (key=value, key==value or key in
// (value)) can only match pods that carry it, so only those are matched,
// and the answer stays current while they do not change; of several such
// labels the one the fewest pods carry is taken. A selector that requires
// none is matched against every pod.
func (t *podTable) match(selector labels.Selector, grow func(int), fn func(int32)) (dep labelPair, byLabel bool, gen *generation) {
	var p *posting
	if reqs, ok := selector.Requirements(); ok {
		for i := range reqs {
			l, ok := requiredLabel(&reqs[i])
			if !ok {
				continue
			}
			q := t.posting(l)
			if !byLabel || q.len() < p.len() {
				dep, byLabel, p = l, true, q
			}
		}
	}
	if t == nil {
		return dep, byLabel, nil
	}
	everything := selector.Empty()
	matches := func(i int32) {
		if everything || selector.Matches(labels.Set(t.pods[i].Labels)) {
			fn(i)
		}
	}
	switch {
	case !byLabel:
		gen = t.gen
	case p == nil:
		return dep, byLabel, nil // no pod carries the label
	default:
		gen = p.gen
		// Walking a label's slots in a map costs several times what
		// walking the table's array does: a label most pods carry is
		// cheaper to check on the array.
		if len(p.slots) < len(t.pods)/4 {
			grow(len(p.slots))
			slots := make([]int32, 0, len(p.slots))
			for i := range p.slots {
				slots = append(slots, i)
			}
			slices.Sort(slots)
			for _, i := range slots {
				matches(i)
			}
			return dep, byLabel, gen
		}
	}
	if byLabel {
		grow(len(p.slots))
	} else {
		grow(len(t.pods))
	}
	for i := range t.pods {
		matches(int32(i))
	}
	return dep, byLabel, gen
}

// posting returns the pods of label l, nil when none carries it (or t is
// nil).
func (t *podTable) posting(l labelPair) *posting {
	if t == nil {
		return nil
	}
	return t.byLabel[l]
}

func (p *posting) len() int {
	if p == nil {
		return 0
	}
	return len(p.slots)
}

// requiredLabel returns the label r requires a pod to carry, if it
// requires one.
func requiredLabel(r *labels.Requirement) (labelPair, bool) {
	switch r.Operator() {
	case selection.Equals, selection.DoubleEquals, selection.In:
		if v := r.ValuesUnsorted(); len(v) == 1 {
			return labelPair{r.Key(), v[0]}, true
		}
	}
	return labelPair{}, false
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
