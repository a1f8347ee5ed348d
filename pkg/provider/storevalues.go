package provider

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/pkg/histogram"
	"github.com/gpuscale/gpuscale/pkg/store"
)

// storeValues answers from the embedded scraper's in-memory store.
type storeValues struct {
	st           *store.Store
	maxStaleness time.Duration
	ttftWindow   time.Duration
	now          func() time.Time
}

// NewStoreValues returns the embedded source: values from st, where a
// sample older than maxStaleness is no value and TTFT quantiles are
// computed over ttftWindow. now may be nil (time.Now).
func NewStoreValues(st *store.Store, maxStaleness, ttftWindow time.Duration, now func() time.Time) Values {
	if now == nil {
		now = time.Now
	}
	return &storeValues{st: st, maxStaleness: maxStaleness, ttftWindow: ttftWindow, now: now}
}

func (s *storeValues) def(m Metric) (metricDef, error) {
	d, ok := podMetricsByName[m.Name]
	if !ok {
		return metricDef{}, fmt.Errorf("store: unknown metric %q", m.Name)
	}
	return d, nil
}

// lookupKey keys a PodSet's store.Lookup in its Memo.
type lookupKey struct{ st *store.Store }

// Pods implements Values.
func (s *storeValues) Pods(_ context.Context, set *PodSet, m Metric, sel labels.Selector) ([]Value, error) {
	def, err := s.def(m)
	if err != nil {
		return nil, err
	}
	now := s.now()
	out := make([]Value, len(set.Pods))
	mm := newModelMatcher(sel)
	if set.Namespace != "" {
		// The HPA's list call: one store pass under one lock, with the
		// pods' places in the store kept as long as the set is.
		lookup := set.Memo(lookupKey{s.st}, func() any { return store.NewLookup(set.Namespace, set.Names()) }).(*store.Lookup)
		if def.isTTFT() {
			// Each pod's two window ends are cache misses: at thousands
			// of pods, cores reading their shares at once answer sooner.
			inParallel(len(out), func(lo, hi int) {
				mm := newModelMatcher(sel)
				s.st.TTFTEachIn(lookup, lo, hi, now, s.ttftWindow, s.maxStaleness, func(i int, newest *store.Sample, inc *histogram.Histogram) {
					if !mm.matches(newest.Model) {
						return
					}
					if q := histogram.Quantile(def.quantile, inc); !math.IsNaN(q) && !math.IsInf(q, 0) {
						out[i] = Value{V: q, Time: newest.Time}
					}
				})
			})
			return out, nil
		}
		s.st.LatestEach(lookup, def.source, now, s.maxStaleness,
			func(i int, smp *store.Sample) {
				if !mm.matches(smp.Model) {
					return
				}
				if v, ok := smp.Get(def.signal); ok {
					out[i] = Value{V: v, Time: smp.Time}
				}
			})
		return out, nil
	}
	for i, pod := range set.Pods {
		if v, ok := s.podValue(pod, def, mm, now); ok {
			out[i] = v
		}
	}
	return out, nil
}

// podValue is a pod's value: none unless its newest sample is fresh; a
// dead target's last sample is not today's value.
func (s *storeValues) podValue(pod *corev1.Pod, def metricDef, mm *modelMatcher, now time.Time) (Value, bool) {
	key := store.Key{Namespace: pod.Namespace, Name: pod.Name}
	smp, ok := s.st.Latest(key, def.source, now, s.maxStaleness)
	if !ok || !mm.matches(smp.Model) {
		return Value{}, false
	}
	if def.isTTFT() {
		inc, ok := s.ttftIncrease(key, now)
		if !ok {
			return Value{}, false
		}
		q := histogram.Quantile(def.quantile, inc)
		if math.IsNaN(q) || math.IsInf(q, 0) {
			return Value{}, false
		}
		return Value{V: q, Time: smp.Time}, true
	}
	v, ok := smp.Get(def.signal)
	return Value{V: v, Time: smp.Time}, ok
}

// ttftIncrease is the per-bucket increase of a pod's TTFT histogram over
// the window, which is what rate() feeds histogram_quantile in PromQL.
func (s *storeValues) ttftIncrease(key store.Key, now time.Time) (*histogram.Histogram, bool) {
	return s.st.TTFTIncrease(key, now, s.ttftWindow, s.maxStaleness)
}

// Workload implements Values: sums for queue depth and running requests,
// means for utilizations, and for TTFT a quantile of the merged histogram
// increases (never a mean of quantiles).
func (s *storeValues) Workload(_ context.Context, _ string, pods []*corev1.Pod, m Metric, sel labels.Selector) (Value, bool, error) {
	def, err := s.def(m)
	if err != nil {
		return Value{}, false, err
	}
	now := s.now()
	mm := newModelMatcher(sel)
	var a modelAgg
	for _, pod := range pods {
		key := store.Key{Namespace: pod.Namespace, Name: pod.Name}
		smp, ok := s.st.Latest(key, def.source, now, s.maxStaleness)
		if !ok || !mm.matches(smp.Model) {
			continue
		}
		s.add(&a, key, smp, def, now)
	}
	v, ok := a.value(def)
	return v, ok, nil
}

// add accumulates one pod's fresh sample.
func (s *storeValues) add(a *modelAgg, key store.Key, smp store.Sample, def metricDef, now time.Time) {
	if def.isTTFT() {
		if inc, ok := s.ttftIncrease(key, now); ok {
			a.incs = append(a.incs, inc)
			a.newest = later(a.newest, smp.Time)
		}
		return
	}
	if v, ok := smp.Get(def.signal); ok {
		a.sum += v
		a.n++
		a.newest = later(a.newest, smp.Time)
	}
}

// Nodes implements Values from the exporters' whole-node samples.
func (s *storeValues) Nodes(_ context.Context, nodes []string, m Metric) (map[string]Value, error) {
	def, err := s.def(m)
	if err != nil {
		return nil, err
	}
	now := s.now()
	out := make(map[string]Value, len(nodes))
	for _, n := range nodes {
		smp, ok := s.st.LatestNode(n, now, s.maxStaleness)
		if v, has := smp.Get(def.signal); ok && has {
			out[n] = Value{V: v, Time: smp.Time}
		}
	}
	return out, nil
}

// Models implements Values: the pods' samples grouped by their model.
func (s *storeValues) Models(_ context.Context, _ string, pods []*corev1.Pod, m Metric, sel labels.Selector) (map[string]Value, error) {
	def, err := s.def(m)
	if err != nil {
		return nil, err
	}
	now := s.now()
	mm := newModelMatcher(sel)
	byModel := map[string]*modelAgg{}
	for _, pod := range pods {
		key := store.Key{Namespace: pod.Namespace, Name: pod.Name}
		smp, ok := s.st.Latest(key, store.SourceInference, now, s.maxStaleness)
		if !ok || smp.Model == "" || !mm.matches(smp.Model) {
			continue
		}
		a := byModel[smp.Model]
		if a == nil {
			a = &modelAgg{}
			byModel[smp.Model] = a
		}
		s.add(a, key, smp, def, now)
	}
	out := make(map[string]Value, len(byModel))
	for model, a := range byModel {
		if v, ok := a.value(def); ok {
			out[model] = v
		}
	}
	return out, nil
}

// modelAgg accumulates the pods of one workload or model.
type modelAgg struct {
	sum    float64
	n      int
	incs   []*histogram.Histogram
	newest time.Time
}

func (a *modelAgg) value(def metricDef) (Value, bool) {
	if def.isTTFT() {
		q, ok := quantileOf(def.quantile, a.incs)
		return Value{V: q, Time: a.newest}, ok
	}
	if a.n == 0 {
		return Value{}, false
	}
	v := a.sum
	if def.agg == mean {
		v /= float64(a.n)
	}
	return Value{V: v, Time: a.newest}, true
}

func quantileOf(q float64, incs []*histogram.Histogram) (float64, bool) {
	if len(incs) == 0 {
		return 0, false
	}
	merged, err := histogram.Merge(incs...)
	if err != nil {
		return 0, false
	}
	v := histogram.Quantile(q, merged)
	return v, !math.IsNaN(v) && !math.IsInf(v, 0)
}

// modelMatcher applies a metric label selector to the served model, the one
// label gpuscale's inference metrics carry. The pods of a request serve one
// model or a few, so it keeps its last answer instead of building a label
// set for each of thousands of pods.
type modelMatcher struct {
	sel    labels.Selector
	all    bool
	seen   bool
	model  string
	result bool
}

func newModelMatcher(sel labels.Selector) *modelMatcher {
	return &modelMatcher{sel: sel, all: sel == nil || sel.Empty()}
}

func (m *modelMatcher) matches(model string) bool {
	if m.all {
		return true
	}
	if !m.seen || model != m.model {
		m.seen, m.model = true, model
		m.result = m.sel.Matches(labels.Set{ModelLabel: model})
	}
	return m.result
}

// parallelMin is the least work, in pods, worth a goroutine of its own.
const parallelMin = 2048

// inParallel calls fn over [0, n) split into contiguous shares, one per
// CPU the runtime may use and at least parallelMin long, each on its own
// goroutine but the last, and returns when all have.
func inParallel(n int, fn func(lo, hi int)) {
	shares := min(runtime.GOMAXPROCS(0), n/parallelMin)
	if shares <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	for k := range shares - 1 {
		wg.Go(func() { fn(k*n/shares, (k+1)*n/shares) })
	}
	fn((shares-1)*n/shares, n)
	wg.Wait()
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
