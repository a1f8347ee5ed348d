// Package storesource answers the adapter's metric values from the
// embedded scraper's in-memory store (pkg/adapter/store): the default --source, and
// the peer of pkg/adapter/promsource.
package storesource

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// Source implements provider.Values over a store.
type Source struct {
	st           *store.Store
	maxStaleness time.Duration
	ttftWindow   time.Duration
	now          func() time.Time
	// lookup keys the pods' places in the store in each PodSet's memo.
	lookup *provider.MemoKey[*store.Lookup]
}

var _ provider.Values = (*Source)(nil)

// New returns the embedded source: values from st, where a sample older
// than maxStaleness is no value and latency quantiles (TTFT, ITL) are
// computed over ttftWindow. now may be nil (time.Now).
func New(st *store.Store, maxStaleness, ttftWindow time.Duration, now func() time.Time) *Source {
	if now == nil {
		now = time.Now
	}
	return &Source{st: st, maxStaleness: maxStaleness, ttftWindow: ttftWindow, now: now,
		lookup: provider.NewMemoKey[*store.Lookup]("store lookup")}
}

// def checks that m is a metric the provider serves, and says where the
// store keeps it.
func (s *Source) def(m provider.Metric) (provider.Metric, error) {
	d, ok := provider.MetricByName(m.Name)
	if !ok {
		return provider.Metric{}, fmt.Errorf("store: unknown metric %q", m.Name)
	}
	return d, nil
}

// Pods implements Values.
func (s *Source) Pods(_ context.Context, set *provider.PodSet, m provider.Metric, sel labels.Selector) ([]provider.Value, error) {
	def, err := s.def(m)
	if err != nil {
		return nil, err
	}
	now := s.now()
	out := make([]provider.Value, len(set.Pods))
	mm := newModelMatcher(sel)
	if set.Namespace != "" {
		// The HPA's list call: one store pass under one lock, with the
		// pods' places in the store kept as long as the set is.
		lookup := provider.Memo(set, s.lookup, func() *store.Lookup { return store.NewLookup(set.Namespace, set.Names()) })
		if def.IsQuantile() {
			// Readers of the same pods within a scrape interval share
			// each pod's quantile (store.QuantileMemo); a list that finds
			// the memo taken by another works without it.
			memo := lookup.Quantiles(def.Hist, def.Quantile, s.ttftWindow)
			if memo.TryAcquire() {
				defer memo.Release()
			} else {
				memo = nil
			}
			// The memo's answers are cheap and come first, on this
			// goroutine; the pods it cannot answer read their two window
			// ends, cache misses at thousands of pods, so cores reading
			// their shares at once answer those sooner. Splitting the
			// whole list instead would make a list the memo answers wait
			// for a core that scraping holds.
			emit := func(mm *modelMatcher) func(int, *store.Sample, float64) {
				return func(i int, newest *store.Sample, q float64) {
					if mm.matches(newest.Model) && !math.IsNaN(q) && !math.IsInf(q, 0) {
						out[i] = provider.Value{V: q, Time: newest.Time}
					}
				}
			}
			misses := s.st.HistQuantileHits(lookup, def.Hist, def.Quantile, memo, now, s.ttftWindow, s.maxStaleness, emit(mm))
			inParallel(len(misses), func(lo, hi int) {
				s.st.HistQuantileEachOf(lookup, def.Hist, def.Quantile, memo, misses[lo:hi], now, s.ttftWindow, s.maxStaleness, emit(newModelMatcher(sel)))
			})
			return out, nil
		}
		s.st.LatestEach(lookup, def.Source, now, s.maxStaleness,
			func(i int, smp *store.Sample) {
				if !mm.matches(smp.Model) {
					return
				}
				if v, ok := smp.Get(def.Signal); ok {
					out[i] = provider.Value{V: v, Time: smp.Time}
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
func (s *Source) podValue(pod *corev1.Pod, def provider.Metric, mm *modelMatcher, now time.Time) (provider.Value, bool) {
	key := store.Key{Namespace: pod.Namespace, Name: pod.Name}
	smp, ok := s.st.Latest(key, def.Source, now, s.maxStaleness)
	if !ok || !mm.matches(smp.Model) {
		return provider.Value{}, false
	}
	if def.IsQuantile() {
		inc, ok := s.increase(key, def.Hist, now)
		if !ok {
			return provider.Value{}, false
		}
		q := histogram.Quantile(def.Quantile, inc)
		if math.IsNaN(q) || math.IsInf(q, 0) {
			return provider.Value{}, false
		}
		return provider.Value{V: q, Time: smp.Time}, true
	}
	v, ok := smp.Get(def.Signal)
	return provider.Value{V: v, Time: smp.Time}, ok
}

// increase is the per-bucket increase of a pod's latency histogram of kind
// h over the window, which is what rate() feeds histogram_quantile in
// PromQL.
func (s *Source) increase(key store.Key, h signal.Hist, now time.Time) (*histogram.Histogram, bool) {
	return s.st.HistIncrease(key, h, now, s.ttftWindow, s.maxStaleness)
}

// Workload implements Values: sums for queue depth and running requests,
// means for utilizations, and for latency quantiles a quantile of the
// merged histogram increases (never a mean of quantiles).
func (s *Source) Workload(_ context.Context, _ string, pods []*corev1.Pod, m provider.Metric, sel labels.Selector) (provider.Value, bool, error) {
	def, err := s.def(m)
	if err != nil {
		return provider.Value{}, false, err
	}
	now := s.now()
	mm := newModelMatcher(sel)
	var a modelAgg
	for _, pod := range pods {
		key := store.Key{Namespace: pod.Namespace, Name: pod.Name}
		smp, ok := s.st.Latest(key, def.Source, now, s.maxStaleness)
		if !ok || !mm.matches(smp.Model) {
			continue
		}
		s.add(&a, key, smp, def, now)
	}
	v, ok := a.value(def)
	return v, ok, nil
}

// add accumulates one pod's fresh sample.
func (s *Source) add(a *modelAgg, key store.Key, smp store.Sample, def provider.Metric, now time.Time) {
	if def.IsQuantile() {
		if inc, ok := s.increase(key, def.Hist, now); ok {
			a.incs = append(a.incs, inc)
			a.newest = later(a.newest, smp.Time)
		}
		return
	}
	if v, ok := smp.Get(def.Signal); ok {
		a.sum += v
		a.n++
		a.newest = later(a.newest, smp.Time)
	}
}

// Nodes implements Values from the exporters' whole-node samples.
func (s *Source) Nodes(_ context.Context, nodes []string, m provider.Metric) (map[string]provider.Value, error) {
	def, err := s.def(m)
	if err != nil {
		return nil, err
	}
	now := s.now()
	out := make(map[string]provider.Value, len(nodes))
	for _, n := range nodes {
		smp, ok := s.st.LatestNode(n, now, s.maxStaleness)
		if v, has := smp.Get(def.Signal); ok && has {
			out[n] = provider.Value{V: v, Time: smp.Time}
		}
	}
	return out, nil
}

// Models implements Values: the pods' samples grouped by their model.
func (s *Source) Models(_ context.Context, _ string, pods []*corev1.Pod, m provider.Metric, sel labels.Selector) (map[string]provider.Value, error) {
	def, err := s.def(m)
	if err != nil {
		return nil, err
	}
	now := s.now()
	mm := newModelMatcher(sel)
	byModel := map[string]*modelAgg{}
	agg := func(model string) *modelAgg {
		a := byModel[model]
		if a == nil {
			a = &modelAgg{}
			byModel[model] = a
		}
		return a
	}
	routed := holdsRequests(def)
	for _, pod := range pods {
		key := store.Key{Namespace: pod.Namespace, Name: pod.Name}
		if routed {
			s.addRouter(key, mm, now, agg)
		}
		smp, ok := s.st.Latest(key, signal.SourceInference, now, s.maxStaleness)
		if !ok || smp.Model == "" || !mm.matches(smp.Model) {
			continue
		}
		s.add(agg(smp.Model), key, smp, def, now)
	}
	out := make(map[string]provider.Value, len(byModel))
	for model, a := range byModel {
		if v, ok := a.value(def); ok {
			out[model] = v
		}
	}
	return out, nil
}

// holdsRequests reports whether routers' held requests count towards m: a
// request a router holds for a model is waiting for it, so it is queue
// depth; it is neither running nor in any KV cache, and has no latency yet.
func holdsRequests(m provider.Metric) bool {
	return !m.IsQuantile() && m.Source == signal.SourceInference && m.Signal == signal.QueueDepth
}

// addRouter adds what a router pod holds for each model the selector
// matches, if its newest scrape is fresh: a stale router is no value, not
// a fresh zero. A router that names a model holding nothing for it adds 0,
// so a model with no server but a router in front has a value.
func (s *Source) addRouter(key store.Key, mm *modelMatcher, now time.Time, agg func(model string) *modelAgg) {
	r, ok := s.st.LatestRouter(key, now, s.maxStaleness)
	if !ok {
		return
	}
	for model, held := range r.Held {
		if model == "" || !mm.matches(model) {
			continue
		}
		a := agg(model)
		a.sum += held
		a.n++
		a.newest = later(a.newest, r.Time)
	}
}

// modelAgg accumulates the pods of one workload or model.
type modelAgg struct {
	sum    float64
	n      int
	incs   []*histogram.Histogram
	newest time.Time
}

func (a *modelAgg) value(def provider.Metric) (provider.Value, bool) {
	if def.IsQuantile() {
		q, ok := quantileOf(def.Quantile, a.incs)
		return provider.Value{V: q, Time: a.newest}, ok
	}
	if a.n == 0 {
		return provider.Value{}, false
	}
	v := a.sum
	if !def.Sum {
		v /= float64(a.n)
	}
	return provider.Value{V: v, Time: a.newest}, true
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
// label gpuscale's inference metrics carry, under its label value
// (provider.ModelLabelValue). The pods of a request serve one
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
		m.result = m.sel.Matches(labels.Set{provider.ModelLabel: provider.ModelLabelValue(model)})
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
