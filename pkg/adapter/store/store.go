// Package store keeps the adapter's recent samples in memory: for every pod
// and node, a bounded window of what its scrapes said. Writers are the
// scrape pipeline; readers are the metrics API. Nothing here knows about
// HTTP or Kubernetes objects.
//
// What a sample holds is pkg/signal's vocabulary (the signals, their
// sources and latency histograms, and the checks a value must pass); this
// package keeps only the storage: windows of samples per object and source,
// the routers' held counts, and the lookups the API reads them through.
package store

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// Sample is one scrape's worth of signals for one object.
type Sample struct {
	Time    time.Time
	values  [signal.NumSignals]float64
	present uint16
	// TTFT is the cumulative time-to-first-token histogram, if the server
	// has one. PutPod drops one that fails CheckTTFT.
	TTFT *histogram.Histogram
	// ITL is the cumulative inter-token latency histogram in seconds, if
	// the server has one; kept and checked as TTFT is.
	ITL *histogram.Histogram
	// Prefill is the cumulative histogram of finished requests' time in
	// prefill, in seconds, if the server has one. Only the newest sample's
	// is read (by the capacity signal), so the window keeps none.
	Prefill *histogram.Histogram
	// Model is the served model, for per-model external metrics.
	Model string
	// inWindow has bit k set for each histogram kind k that the store
	// keeps of this sample in its window only (objects.put).
	inWindow uint8
}

// Hist returns the sample's histogram of kind h, nil if it has none.
func (s *Sample) Hist(h signal.Hist) *histogram.Histogram {
	switch h {
	case signal.HistTTFT:
		return s.TTFT
	case signal.HistITL:
		return s.ITL
	}
	return nil
}

func (s *Sample) setHist(h signal.Hist, v *histogram.Histogram) {
	switch h {
	case signal.HistTTFT:
		s.TTFT = v
	case signal.HistITL:
		s.ITL = v
	}
}

// windowHas reports whether the store keeps the sample's histogram of kind
// h, in its window: true of every stored newest sample that came with one.
func (s *Sample) windowHas(h signal.Hist) bool {
	return s.inWindow&(1<<h) != 0
}

// Set records a signal's value.
func (s *Sample) Set(sig signal.Signal, v float64) {
	s.values[sig] = v
	s.present |= 1 << sig
}

// dropInvalid removes the values and the histograms that fail their
// checks. Checked once here, so that the window's arithmetic need not check
// on every API call.
func (s *Sample) dropInvalid() {
	for sig := signal.Signal(0); sig < signal.NumSignals; sig++ {
		if v, ok := s.Get(sig); ok && sig.Check(v) != nil {
			s.present &^= 1 << sig
			s.values[sig] = 0
		}
	}
	if s.TTFT != nil && signal.CheckTTFT(s.TTFT) != nil {
		s.TTFT = nil
	}
	if s.Prefill != nil && signal.CheckTTFT(s.Prefill) != nil {
		s.Prefill = nil
	}
	if s.ITL != nil && signal.CheckTTFT(s.ITL) != nil {
		s.ITL = nil
	}
}

// Get returns a signal's value and whether the sample has it.
func (s *Sample) Get(sig signal.Signal) (float64, bool) {
	if sig >= signal.NumSignals || s.present&(1<<sig) == 0 {
		return 0, false
	}
	return s.values[sig], true
}

// Key identifies a pod ("namespace/name") or a node ("name").
type Key struct{ Namespace, Name string }

type entry struct {
	windows [signal.NumSources]window
}

// objects holds the pods of one namespace, or the nodes. Each object has a
// slot, and each source's newest samples sit in one array by slot rather
// than in the objects' entries: a Pods-metric list over thousands of pods
// then reads one compact array instead of one scattered heap object per
// pod, each a cache miss at that size.
type objects struct {
	slots   map[string]int32
	names   []string // by slot
	entries []*entry // by slot
	latest  [signal.NumSources][]Sample
	// gen counts changes of membership (an object added or removed, so
	// slots moved); a Lookup resolved at another gen is resolved again.
	gen uint64
}

func newObjects() *objects { return &objects{slots: map[string]int32{}} }

// lookup returns the slot of name, or -1.
func (o *objects) lookup(name string) int {
	if o == nil {
		return -1
	}
	i, ok := o.slots[name]
	if !ok {
		return -1
	}
	return int(i)
}

// slot returns the slot of name, adding the object if it is new.
func (o *objects) slot(name string) int {
	if i, ok := o.slots[name]; ok {
		return int(i)
	}
	i := len(o.names)
	o.gen++
	o.slots[name] = int32(i)
	o.names = append(o.names, name)
	o.entries = append(o.entries, &entry{})
	for src := range o.latest {
		o.latest[src] = append(o.latest[src], Sample{})
	}
	return i
}

// remove drops the object in slot i; the last object takes its slot.
func (o *objects) remove(i int) {
	last := len(o.names) - 1
	o.gen++
	delete(o.slots, o.names[i])
	if i != last {
		o.slots[o.names[last]] = int32(i)
		o.names[i], o.entries[i] = o.names[last], o.entries[last]
		for src := range o.latest {
			o.latest[src][i] = o.latest[src][last]
		}
	}
	// Clear the vacated tail so that it holds no histogram or name.
	o.names[last], o.entries[last] = "", nil
	o.names, o.entries = o.names[:last], o.entries[:last]
	for src := range o.latest {
		o.latest[src][last] = Sample{}
		o.latest[src] = o.latest[src][:last]
	}
}

func (o *objects) put(name string, src signal.Source, smp Sample, keep retention, lay *layouts, kept [signal.NumHists]bool) {
	i := o.slot(name)
	last := &o.latest[src][i]
	if !last.Time.IsZero() && smp.Time.UnixNano() <= last.Time.UnixNano() {
		return
	}
	put(&o.entries[i].windows[src], smp, keep, lay, kept)
	if smp.Prefill != nil {
		// Only the newest sample keeps one (the window does not).
		smp.Prefill.Bounds = lay.share(smp.Prefill, last.Prefill)
	}
	for k := range signal.NumHists {
		if smp.Hist(k) != nil {
			// The window's newest point holds it, mostly packed
			// (80 bytes for vLLM's TTFT); a full copy here as well
			// would cost about 250 bytes a pod and kind.
			smp.setHist(k, nil)
			smp.inWindow |= 1 << k
		}
	}
	*last = smp
}

// withHists returns smp, slot i's newest sample from src, with the
// histograms its window keeps unpacked into new histograms (their Bounds
// shared with the store's).
func (o *objects) withHists(i int, src signal.Source, smp Sample) Sample {
	if smp.inWindow == 0 {
		return smp
	}
	for k := range signal.NumHists {
		if smp.windowHas(k) {
			smp.setHist(k, o.newestHist(i, src, k))
		}
	}
	smp.inWindow = 0
	return smp
}

// newestHist is the histogram of kind k of slot i's newest sample from src,
// unpacked into a new histogram (its Bounds shared with the store's), nil
// if the window holds none.
func (o *objects) newestHist(i int, src signal.Source, k signal.Hist) *histogram.Histogram {
	if p := o.entries[i].windows[src].newest().hists[k].h; p != nil {
		return p.unpack(&histogram.Histogram{})
	}
	return nil
}

// fresh returns the newest sample of slot i from src, nil unless it is no
// older than maxAge at now.
func (o *objects) fresh(i int, src signal.Source, now time.Time, maxAge time.Duration) *Sample {
	if i < 0 {
		return nil
	}
	if smp := &o.latest[src][i]; isFresh(smp, now, maxAge) {
		return smp
	}
	return nil
}

func isFresh(smp *Sample, now time.Time, maxAge time.Duration) bool {
	return !smp.Time.IsZero() && now.Sub(smp.Time) <= maxAge
}

// Store is safe for concurrent use. Writers hold the lock for one Put;
// readers for one lookup, so API calls never wait on a scrape cycle.
type Store struct {
	keep retention
	// demand says which namespaces' latency windows are kept.
	demand demand
	mu     sync.RWMutex
	// layouts is guarded by mu, held for writing.
	layouts layouts
	// pods is indexed by namespace: a Pods-metric request walks one
	// namespace.
	pods  map[string]*objects
	nodes *objects
	// routers holds the newest sample of each router pod, by namespace
	// and pod name (routers.go); heldModels counts their models by
	// namespace, heldTotal in all.
	routers    map[string]map[string]RouterSample
	heldModels map[string]int
	heldTotal  int
}

// retention is how much of its history a window keeps.
type retention struct {
	// samples is the window's capacity.
	samples int
	// ttft, when positive, is how far back from the newest sample the
	// latency histograms (TTFT, ITL) are kept; older samples keep their
	// scalars only.
	ttft time.Duration
	// idle, when positive, keeps a namespace's latency windows only
	// while their quantiles are read (demand).
	idle time.Duration
}

// Option configures a Store.
type Option func(*retention)

// WithLatencyWindowIdle keeps a namespace's window of TTFT or ITL
// histograms only from the first read of that kind's quantiles there
// (HistQuantileHits, HistQuantileEachOf, HistIncrease) until d passes
// without one; otherwise only each pod's newest histogram is kept, which
// is all the capacity signal reads (Latest, LatestHistEach). A window
// started by a read answers once it spans the read's window, and not
// before: a shorter one is not the quantile asked for. 0, the default,
// keeps every window and answers from its first two samples.
func WithLatencyWindowIdle(d time.Duration) Option {
	return func(r *retention) { r.idle = d }
}

// WithTTFTRetention drops the latency histograms (TTFT and ITL) of every
// sample more than d older than its window's newest: no window of length d
// or less, evaluated at or after the newest sample, reaches them. The
// histograms are most of a window's memory, and the window is usually
// longer than the TTFT window, which ITL quantiles share.
func WithTTFTRetention(d time.Duration) Option {
	return func(r *retention) { r.ttft = d }
}

// New returns a store keeping at most capacity samples per object and
// source (the window length divided by the scrape interval, plus one).
func New(capacity int, opts ...Option) *Store {
	keep := retention{samples: max(capacity, 2)}
	for _, o := range opts {
		o(&keep)
	}
	return &Store{keep: keep, demand: demand{idle: keep.idle}, pods: map[string]*objects{}, nodes: newObjects(), routers: map[string]map[string]RouterSample{}, heldModels: map[string]int{}}
}

// PutPod appends a pod's sample. Samples must arrive in time order per
// pod and source; an older one is dropped. The store keeps smp's
// histograms, and may point their Bounds at equal bounds it already holds
// (another sample's, another pod's): the caller must not modify them
// afterwards.
//
// A value that fails its signal's Check, and a TTFT histogram that fails
// CheckTTFT, are dropped: ingest rejects and counts them before they get
// here, and the store holds nothing it could not serve.
func (s *Store) PutPod(k Key, src signal.Source, smp Sample) {
	smp.dropInvalid()
	kept := s.demand.kept(k.Namespace, smp.Time)
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.pods[k.Namespace]
	if ns == nil {
		ns = newObjects()
		s.pods[k.Namespace] = ns
	}
	ns.put(k.Name, src, smp, s.keep, &s.layouts, kept)
}

// PutNode appends a node's GPU sample, dropping invalid values as PutPod
// does.
func (s *Store) PutNode(name string, smp Sample) {
	smp.dropInvalid()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes.put(name, signal.SourceGPU, smp, s.keep, &s.layouts, keepAll)
}

// Latest returns the newest sample of a pod from a source, if it is no
// older than maxAge at now. The copy is safe to keep; its histograms are
// the store's or share their bounds with it, and are not to be modified.
func (s *Store) Latest(k Key, src signal.Source, now time.Time, maxAge time.Duration) (Sample, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ns := s.pods[k.Namespace]
	i := ns.lookup(k.Name)
	if smp := ns.fresh(i, src, now, maxAge); smp != nil {
		return ns.withHists(i, src, *smp), true
	}
	return Sample{}, false
}

// Lookup is a list of pods of one namespace, resolved to their places in
// the store. A caller that asks about the same pods again and again (the
// HPA's list call, every 15 seconds, for pods that rarely change) keeps its
// Lookup, and the store resolves the names again only after the namespace
// has gained or lost a pod, instead of one map lookup per pod per call.
// A Lookup is safe for concurrent use.
type Lookup struct {
	namespace string
	names     []string
	resolved  atomic.Pointer[resolved]
	memos     lookupMemos
}

// resolved is a Lookup's slots as of one membership generation of one
// namespace's objects.
type resolved struct {
	objs  *objects
	gen   uint64
	slots []int32 // -1 where the store has no such pod
}

// NewLookup returns a Lookup of names in namespace. names must not be
// modified afterwards.
func NewLookup(namespace string, names []string) *Lookup {
	return &Lookup{namespace: namespace, names: names}
}

// Len returns the number of names looked up.
func (l *Lookup) Len() int { return len(l.names) }

// slots returns the slots of l's names in ns. The caller holds the
// store's lock (read or write), so ns cannot change meanwhile.
func (l *Lookup) slots(ns *objects) []int32 {
	if r := l.resolved.Load(); r != nil && r.objs == ns && r.gen == ns.gen {
		return r.slots
	}
	slots := make([]int32, len(l.names))
	for i, name := range l.names {
		j, ok := ns.slots[name]
		if !ok {
			j = -1
		}
		slots[i] = j
	}
	l.resolved.Store(&resolved{objs: ns, gen: ns.gen, slots: slots})
	return slots
}

// LatestEach calls fn(i, sample) for every name i of l that has a fresh
// newest sample from src, all under one read lock: the Pods-metric path
// over thousands of pods. fn must be quick and must not keep smp. The
// samples' TTFT and ITL are nil: LatestHistEach reads them.
func (s *Store) LatestEach(l *Lookup, src signal.Source, now time.Time, maxAge time.Duration, fn func(i int, smp *Sample)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.eachFreshLocked(l, src, now, maxAge, func(i int, _ *objects, _ int32, smp *Sample) { fn(i, smp) })
}

// eachFreshLocked calls fn for every name i of l that has a fresh newest
// sample from src, smp in slot j of ns. The caller holds the read lock.
func (s *Store) eachFreshLocked(l *Lookup, src signal.Source, now time.Time, maxAge time.Duration, fn func(i int, ns *objects, j int32, smp *Sample)) {
	ns := s.pods[l.namespace]
	if ns == nil {
		return
	}
	latest := ns.latest[src]
	for i, j := range l.slots(ns) {
		if j < 0 {
			continue
		}
		if smp := &latest[j]; isFresh(smp, now, maxAge) {
			fn(i, ns, j, smp)
		}
	}
}

// LatestHistEach calls fn(i, sample, h) for every name i of l whose fresh
// newest sample from src has a histogram of kind k: h, unpacked into a new
// histogram that fn may keep (its Bounds are the store's, not to be
// modified). fn must not keep smp.
func (s *Store) LatestHistEach(l *Lookup, src signal.Source, k signal.Hist, now time.Time, maxAge time.Duration, fn func(i int, smp *Sample, h *histogram.Histogram)) {
	if k >= signal.NumHists {
		return
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.eachFreshLocked(l, src, now, maxAge, func(i int, ns *objects, j int32, smp *Sample) {
		if smp.windowHas(k) {
			if h := ns.newestHist(int(j), src, k); h != nil {
				fn(i, smp, h)
			}
		}
	})
}

// LatestNode is Latest for a node's GPU sample.
func (s *Store) LatestNode(name string, now time.Time, maxAge time.Duration) (Sample, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if smp := s.nodes.fresh(s.nodes.lookup(name), signal.SourceGPU, now, maxAge); smp != nil {
		return *smp, true
	}
	return Sample{}, false
}

// entry returns a pod's entry, nil if the store has none. The caller holds
// the lock.
func (s *Store) entry(k Key) *entry {
	ns := s.pods[k.Namespace]
	if i := ns.lookup(k.Name); i >= 0 {
		return ns.entries[i]
	}
	return nil
}

// TTFTIncrease returns increase(ttft_bucket[win]) of a pod evaluated at
// now, exactly as PromQL computes it over the samples taken in
// (now-win, now] (reset-aware, extrapolated per bucket to the window's
// edges): what rate() feeds histogram_quantile, up to the division by the
// window, which cancels in the quantile. It reports false when the newest sample is older than
// maxAge (a dead server's last histograms are never served), when fewer
// than two samples fall in the window, or when the bucket layout changed
// inside it, and while the pod's namespace has not kept the window for
// win since its first read (WithLatencyWindowIdle).
func (s *Store) TTFTIncrease(k Key, now time.Time, win, maxAge time.Duration) (*histogram.Histogram, bool) {
	return s.HistIncrease(k, signal.HistTTFT, now, win, maxAge)
}

// HistIncrease is TTFTIncrease for the histogram of kind h.
func (s *Store) HistIncrease(k Key, h signal.Hist, now time.Time, win, maxAge time.Duration) (*histogram.Histogram, bool) {
	if h >= signal.NumHists || !s.demand.read(k.Namespace, h, now, win) {
		return nil, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	e := s.entry(k)
	if e == nil {
		return nil, false
	}
	return e.histIncrease(h, now, win, maxAge, nil)
}

// Forget drops pods and nodes whose newest sample of every source is older
// than maxAge, so deleted pods do not hold memory.
func (s *Store) Forget(now time.Time, maxAge time.Duration) (pods, nodes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for nsName, ns := range s.pods {
		pods += ns.forget(now, maxAge)
		if len(ns.names) == 0 {
			delete(s.pods, nsName)
		}
	}
	pods += s.forgetRoutersLocked(now, maxAge)
	return pods, s.nodes.forget(now, maxAge)
}

func (o *objects) forget(now time.Time, maxAge time.Duration) int {
	n := 0
	// Downwards: the object that moves into a freed slot is one already
	// kept.
	for i := len(o.entries) - 1; i >= 0; i-- {
		if o.stale(i, now, maxAge) {
			o.remove(i)
			n++
		}
	}
	return n
}

// stale reports whether slot i's newest sample of every source is older
// than maxAge at now.
func (o *objects) stale(i int, now time.Time, maxAge time.Duration) bool {
	for src := range o.latest {
		if t := o.latest[src][i].Time; !t.IsZero() && now.Sub(t) <= maxAge {
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
		pods += len(ns.names)
	}
	return pods, len(s.nodes.names)
}

// Coverage describes how much fresh data the store holds for one signal.
type Coverage struct {
	// Fresh is the number of objects whose newest sample has the signal
	// and is no older than maxAge.
	Fresh int
	// Newest is the time of the newest such sample (zero if none).
	Newest time.Time
}

// PodCoverage reports, per signal, how many pods have a fresh value. The
// coverage of histogram kind h is reported under NumSignals+h (pods whose
// fresh sample carries one): TTFT's under NumSignals.
func (s *Store) PodCoverage(now time.Time, maxAge time.Duration) [int(signal.NumSignals) + int(signal.NumHists)]Coverage {
	var out [int(signal.NumSignals) + int(signal.NumHists)]Coverage
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, ns := range s.pods {
		for src := range ns.latest {
			for i := range ns.latest[src] {
				cover(&out, &ns.latest[src][i], now, maxAge)
			}
		}
	}
	return out
}

func cover(out *[int(signal.NumSignals) + int(signal.NumHists)]Coverage, n *Sample, now time.Time, maxAge time.Duration) {
	if !isFresh(n, now, maxAge) {
		return
	}
	for sig := signal.Signal(0); sig < signal.NumSignals; sig++ {
		if _, ok := n.Get(sig); ok {
			out[sig].add(n.Time)
		}
	}
	for k := range signal.NumHists {
		if n.windowHas(k) {
			out[int(signal.NumSignals)+int(k)].add(n.Time)
		}
	}
}

func (c *Coverage) add(t time.Time) {
	c.Fresh++
	if t.After(c.Newest) {
		c.Newest = t
	}
}
