package provider

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

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

func (t *podTable) slot(name string) (int32, bool) {
	if t == nil {
		return 0, false
	}
	i, ok := t.slots[name]
	return i, ok
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
