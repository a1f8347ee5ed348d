// Package store keeps the adapter's recent samples in memory: for every pod
// and node, a bounded window of what its scrapes said. Writers are the
// scrape pipeline; readers are the metrics API. Nothing here knows about
// HTTP or Kubernetes objects.
package store

import (
	"sync"
	"time"

	"github.com/gpuscale/gpuscale/pkg/histogram"
)

// Signal is one scalar the adapter serves.
type Signal uint8

// The scalar signals. TTFT is kept as a histogram beside them.
const (
	GPUUtilization       Signal = iota // percent, mean over the object's GPUs
	GPUMemoryUtilization               // percent of framebuffer in use
	GPUMemoryUsedBytes                 // bytes
	GPUPowerWatts                      // watts, sum over the object's GPUs
	QueueDepth                         // requests waiting
	RequestsRunning                    // requests being processed
	KVCacheUtilization                 // percent
	NumSignals
)

// Source names the kind of scrape a sample came from. A pod has one window
// per source, so an exporter that goes away takes only the GPU signals with
// it.
type Source uint8

// Sources.
const (
	SourceGPU Source = iota
	SourceInference
	numSources
)

// Sample is one scrape's worth of signals for one object.
type Sample struct {
	Time    time.Time
	values  [NumSignals]float64
	present uint16
	// TTFT is the cumulative time-to-first-token histogram, if the server
	// has one.
	TTFT *histogram.Histogram
	// Model is the served model, for per-model external metrics.
	Model string
}

// Set records a signal's value.
func (s *Sample) Set(sig Signal, v float64) {
	s.values[sig] = v
	s.present |= 1 << sig
}

// Get returns a signal's value and whether the sample has it.
func (s *Sample) Get(sig Signal) (float64, bool) {
	if sig >= NumSignals || s.present&(1<<sig) == 0 {
		return 0, false
	}
	return s.values[sig], true
}

// Key identifies a pod ("namespace/name") or a node ("name").
type Key struct{ Namespace, Name string }

// window is a ring of samples, oldest first.
type window struct {
	buf   []Sample
	start int
	n     int
}

func (w *window) push(s Sample, capacity int) {
	if w.buf == nil {
		w.buf = make([]Sample, capacity)
	}
	if w.n < len(w.buf) {
		w.buf[(w.start+w.n)%len(w.buf)] = s
		w.n++
		return
	}
	w.buf[w.start] = s
	w.start = (w.start + 1) % len(w.buf)
}

func (w *window) at(i int) *Sample { return &w.buf[(w.start+i)%len(w.buf)] }

func (w *window) newest() *Sample {
	if w.n == 0 {
		return nil
	}
	return w.at(w.n - 1)
}

type entry struct {
	windows [numSources]window
	// latest copies each window's newest sample, so the API's hot path
	// reads one object per pod instead of chasing the ring.
	latest [numSources]Sample
	// ttft memoises the last window increase: it only changes when a
	// sample enters or leaves the window, not on every API call.
	ttft ttftCache
}

type ttftCache struct {
	first, last time.Time
	n           int
	firstHist   *histogram.Histogram
	inc         *histogram.Histogram
	err         error
}

// Store is safe for concurrent use. Writers hold the lock for one Put;
// readers for one lookup, so API calls never wait on a scrape cycle.
type Store struct {
	capacity int
	mu       sync.RWMutex
	// pods is indexed by namespace, then name: a Pods-metric request
	// walks one namespace.
	pods  map[string]map[string]*entry
	nodes map[string]*entry
}

// New returns a store keeping at most capacity samples per object and
// source (the window length divided by the scrape interval, plus one).
func New(capacity int) *Store {
	if capacity < 2 {
		capacity = 2
	}
	return &Store{capacity: capacity, pods: map[string]map[string]*entry{}, nodes: map[string]*entry{}}
}

// PutPod appends a pod's sample. Samples must arrive in time order per
// pod and source; an older one is dropped.
func (s *Store) PutPod(k Key, src Source, smp Sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.pods[k.Namespace]
	if ns == nil {
		ns = map[string]*entry{}
		s.pods[k.Namespace] = ns
	}
	e := ns[k.Name]
	if e == nil {
		e = &entry{}
		ns[k.Name] = e
	}
	if put(&e.windows[src], smp, s.capacity) {
		e.latest[src] = smp
	}
}

// PutNode appends a node's GPU sample.
func (s *Store) PutNode(name string, smp Sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.nodes[name]
	if e == nil {
		e = &entry{}
		s.nodes[name] = e
	}
	if put(&e.windows[SourceGPU], smp, s.capacity) {
		e.latest[SourceGPU] = smp
	}
}

// put appends smp unless it is not newer than the window's newest.
func put(w *window, smp Sample, capacity int) bool {
	if last := w.newest(); last != nil && !smp.Time.After(last.Time) {
		return false
	}
	w.push(smp, capacity)
	return true
}

// Latest returns the newest sample of a pod from a source, if it is no
// older than maxAge at now. The copy is safe to keep.
func (s *Store) Latest(k Key, src Source, now time.Time, maxAge time.Duration) (Sample, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return latest(s.pods[k.Namespace][k.Name], src, now, maxAge)
}

// LatestEach calls fn(i, sample) for every i in [0, n) whose pod
// name(i) in namespace has a fresh newest sample from src, all under one
// read lock: the Pods-metric path over thousands of pods. fn must be quick
// and must not keep smp.
func (s *Store) LatestEach(namespace string, n int, name func(i int) string, src Source, now time.Time, maxAge time.Duration, fn func(i int, smp *Sample)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ns := s.pods[namespace]
	if ns == nil {
		return
	}
	for i := 0; i < n; i++ {
		e := ns[name(i)]
		if e == nil {
			continue
		}
		if smp := &e.latest[src]; !smp.Time.IsZero() && now.Sub(smp.Time) <= maxAge {
			fn(i, smp)
		}
	}
}

// LatestNode is Latest for a node's GPU sample.
func (s *Store) LatestNode(name string, now time.Time, maxAge time.Duration) (Sample, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return latest(s.nodes[name], SourceGPU, now, maxAge)
}

func latest(e *entry, src Source, now time.Time, maxAge time.Duration) (Sample, bool) {
	if e == nil {
		return Sample{}, false
	}
	n := &e.latest[src]
	if n.Time.IsZero() || now.Sub(n.Time) > maxAge {
		return Sample{}, false
	}
	return *n, true
}

// TTFTIncrease returns increase(ttft_bucket[win]) of a pod evaluated at
// now, exactly as PromQL computes it over the samples taken in
// (now-win, now] (reset-aware, extrapolated per bucket to the window's
// edges): what rate() feeds histogram_quantile, up to the division by the
// window, which cancels in the quantile. It reports false when the newest sample is older than
// maxAge (a dead server's last histograms are never served), when fewer
// than two samples fall in the window, or when the bucket layout changed
// inside it.
func (s *Store) TTFTIncrease(k Key, now time.Time, win, maxAge time.Duration) (*histogram.Histogram, bool) {
	s.mu.RLock()
	e := s.pods[k.Namespace][k.Name]
	if e == nil {
		s.mu.RUnlock()
		return nil, false
	}
	w := &e.windows[SourceInference]
	if n := w.newest(); n == nil || now.Sub(n.Time) > maxAge {
		s.mu.RUnlock()
		return nil, false
	}
	from := now.Add(-win)
	first, last, count := -1, -1, 0
	for i := 0; i < w.n; i++ {
		smp := w.at(i)
		if smp.Time.After(from) && !smp.Time.After(now) && smp.TTFT != nil {
			if first < 0 {
				first = i
			}
			last = i
			count++
		}
	}
	if count < 2 {
		s.mu.RUnlock()
		return nil, false
	}
	firstT, lastT := w.at(first).Time, w.at(last).Time
	if c := e.ttft; c.first.Equal(firstT) && c.last.Equal(lastT) && (c.inc != nil || c.err != nil) {
		s.mu.RUnlock()
		if c.err != nil {
			return nil, false
		}
		return histogram.Extrapolate(c.inc, c.firstHist, firstT, lastT, c.n, now, win), true
	}
	hs := make([]*histogram.Histogram, 0, count)
	for i := first; i <= last; i++ {
		if smp := w.at(i); smp.TTFT != nil {
			hs = append(hs, smp.TTFT)
		}
	}
	s.mu.RUnlock()

	// The increase between samples only changes when a sample enters or
	// leaves the window, so it is memoised; the extrapolation depends on
	// now and is redone on every call.
	inc, err := histogram.WindowIncrease(hs)
	s.mu.Lock()
	if e2 := s.pods[k.Namespace][k.Name]; e2 == e {
		e.ttft = ttftCache{first: firstT, last: lastT, n: len(hs), firstHist: hs[0], inc: inc, err: err}
	}
	s.mu.Unlock()
	if err != nil {
		return nil, false
	}
	return histogram.Extrapolate(inc, hs[0], firstT, lastT, len(hs), now, win), true
}

// Forget drops pods and nodes whose newest sample of every source is older
// than maxAge, so deleted pods do not hold memory.
func (s *Store) Forget(now time.Time, maxAge time.Duration) (pods, nodes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for nsName, ns := range s.pods {
		for k, e := range ns {
			if stale(e, now, maxAge) {
				delete(ns, k)
				pods++
			}
		}
		if len(ns) == 0 {
			delete(s.pods, nsName)
		}
	}
	for k, e := range s.nodes {
		if stale(e, now, maxAge) {
			delete(s.nodes, k)
			nodes++
		}
	}
	return pods, nodes
}

func stale(e *entry, now time.Time, maxAge time.Duration) bool {
	for i := range e.windows {
		if n := e.windows[i].newest(); n != nil && now.Sub(n.Time) <= maxAge {
			return false
		}
	}
	return true
}

// Len returns the number of pods and nodes held.
func (s *Store) Len() (pods, nodes int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, ns := range s.pods {
		pods += len(ns)
	}
	return pods, len(s.nodes)
}

// Coverage describes how much fresh data the store holds for one signal.
type Coverage struct {
	// Fresh is the number of objects whose newest sample has the signal
	// and is no older than maxAge.
	Fresh int
	// Newest is the time of the newest such sample (zero if none).
	Newest time.Time
}

// PodCoverage reports, per signal, how many pods have a fresh value. TTFT
// coverage is reported under NumSignals (pods whose fresh sample carries a
// histogram).
func (s *Store) PodCoverage(now time.Time, maxAge time.Duration) [NumSignals + 1]Coverage {
	var out [NumSignals + 1]Coverage
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, ns := range s.pods {
		for _, e := range ns {
			coverEntry(&out, e, now, maxAge)
		}
	}
	return out
}

func coverEntry(out *[NumSignals + 1]Coverage, e *entry, now time.Time, maxAge time.Duration) {
	for src := range e.latest {
		n := &e.latest[src]
		if n.Time.IsZero() || now.Sub(n.Time) > maxAge {
			continue
		}
		for sig := Signal(0); sig < NumSignals; sig++ {
			if _, ok := n.Get(sig); ok {
				out[sig].add(n.Time)
			}
		}
		if n.TTFT != nil {
			out[NumSignals].add(n.Time)
		}
	}
}

func (c *Coverage) add(t time.Time) {
	c.Fresh++
	if t.After(c.Newest) {
		c.Newest = t
	}
}
