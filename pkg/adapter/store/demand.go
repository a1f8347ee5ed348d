package store

import (
	"sync"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal"
)

// demand is who reads the histograms, per namespace. With an idle time set
// (WithLatencyWindowIdle) a namespace's pods keep, and have parsed, only
// what some reader there has read within it:
//
//   - Histograms: the families of the TTFT, ITL and prefill-time
//     histograms, which are most of what a scrape of an inference server
//     parses. The capacity signal reads all three (each pod's newest), the
//     TTFT and ITL quantiles their own. The scrape loop asks HistogramsRead
//     which to parse.
//   - Windows: only the TTFT and ITL quantiles read more than a pod's newest
//     histogram, and a window of either kind costs about 1 KiB a pod (14
//     packed histograms at the default minute and 5 s scrape). A namespace
//     keeps a kind's window from the first read of its quantiles there, and
//     otherwise its newest histogram alone.
//
// A window started by a read holds only what came after it, so its
// quantiles are answered only once it spans a whole window (read): until
// then an answer would cover less time than PromQL's over the same
// samples, and a smaller window is not the value asked for.
type demand struct {
	// idle is how long what is read is kept without reads; 0 keeps and
	// parses everything, and answers from a window's first two samples.
	idle time.Duration
	mu   sync.Mutex
	ns   map[string]*nsDemand
}

// nsDemand is one namespace's demand, in Unix nanoseconds.
type nsDemand struct {
	windows [signal.NumHists]kindDemand
	// parsed are the newest reads of each histogram family group.
	parsed [numHistograms]int64
}

// kindDemand is one namespace's demand for one kind's window.
type kindDemand struct {
	// since is when the window was started by a read, 0 while not kept.
	since int64
	// readAt is the newest read's time.
	readAt int64
}

// Histograms is a set of histogram families a namespace's readers read.
type Histograms uint8

// The histogram families read.
const (
	HistogramsTTFT Histograms = 1 << iota
	HistogramsITL
	HistogramsPrefill
	numHistograms = iota

	// AllHistograms is every one: what is parsed without an idle time.
	AllHistograms = HistogramsTTFT | HistogramsITL | HistogramsPrefill
)

// Has reports whether h holds every one of o.
func (h Histograms) Has(o Histograms) bool { return h&o == o }

// histogramsOf is the family group of a latency kind.
func histogramsOf(k signal.Hist) Histograms {
	if k == signal.HistITL {
		return HistogramsITL
	}
	return HistogramsTTFT
}

// keepAll keeps every kind's window.
var keepAll = func() (keep [signal.NumHists]bool) {
	for k := range keep {
		keep[k] = true
	}
	return keep
}()

// maxDemandNamespaces bounds the namespaces whose reads are remembered: a
// read names its namespace, and a client may name many. Past it a new
// namespace keeps and parses everything, as with no idle time.
const maxDemandNamespaces = 4096

// of returns namespace's demand, made on first use; nil past
// maxDemandNamespaces. The caller holds mu.
func (d *demand) of(namespace string, t int64) *nsDemand {
	nd := d.ns[namespace]
	if nd != nil {
		return nd
	}
	if len(d.ns) >= maxDemandNamespaces {
		d.forget(t)
		if len(d.ns) >= maxDemandNamespaces {
			return nil
		}
	}
	if d.ns == nil {
		d.ns = map[string]*nsDemand{}
	}
	nd = &nsDemand{}
	d.ns[namespace] = nd
	return nd
}

// read records a read of kind k's window in namespace at now, starting the
// window if it is not kept, and reports whether the window spans win: the
// read may be answered.
func (d *demand) read(namespace string, k signal.Hist, now time.Time, win time.Duration) bool {
	if d.idle <= 0 {
		return true
	}
	t := now.UnixNano()
	d.mu.Lock()
	defer d.mu.Unlock()
	nd := d.of(namespace, t)
	if nd == nil {
		return true
	}
	kd := &nd.windows[k]
	kd.readAt = max(kd.readAt, t)
	if kd.since == 0 {
		kd.since = t
	}
	nd.markParsed(histogramsOf(k), t)
	return t-kd.since >= int64(win)
}

// readHistograms records a read of the newest histograms h in namespace.
func (d *demand) readHistograms(namespace string, h Histograms, now time.Time) {
	if d.idle <= 0 {
		return
	}
	t := now.UnixNano()
	d.mu.Lock()
	defer d.mu.Unlock()
	if nd := d.of(namespace, t); nd != nil {
		nd.markParsed(h, t)
	}
}

func (nd *nsDemand) markParsed(h Histograms, t int64) {
	for i := range nd.parsed {
		if h&(1<<i) != 0 {
			nd.parsed[i] = max(nd.parsed[i], t)
		}
	}
}

// histograms is what namespace's pods have parsed at t: what was read there
// within the idle time.
func (d *demand) histograms(namespace string, t time.Time) Histograms {
	if d.idle <= 0 {
		return AllHistograms
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	nd, everything := d.known(namespace)
	if nd == nil {
		if everything {
			return AllHistograms
		}
		return 0
	}
	var h Histograms
	for i, readAt := range nd.parsed {
		if readAt != 0 && t.UnixNano()-readAt <= int64(d.idle) {
			h |= 1 << i
		}
	}
	return h
}

// known returns namespace's demand, nil when none was read there; then
// everything reports whether the namespace is past the ones remembered,
// whose pods keep and parse everything. The caller holds mu.
func (d *demand) known(namespace string) (nd *nsDemand, everything bool) {
	if nd = d.ns[namespace]; nd != nil {
		return nd, false
	}
	return nil, len(d.ns) >= maxDemandNamespaces
}

// forget drops the namespaces not read for the idle time at t. The caller
// holds mu.
func (d *demand) forget(t int64) {
	for ns, nd := range d.ns {
		newest := int64(0)
		for k := range nd.windows {
			newest = max(newest, nd.windows[k].readAt)
		}
		for _, readAt := range nd.parsed {
			newest = max(newest, readAt)
		}
		if t-newest > int64(d.idle) {
			delete(d.ns, ns)
		}
	}
}

// kept reports, per kind, whether namespace's windows keep it at t (a
// sample's time), forgetting the demand that has been idle too long.
func (d *demand) kept(namespace string, t time.Time) (keep [signal.NumHists]bool) {
	if d.idle <= 0 {
		return keepAll
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	nd, everything := d.known(namespace)
	if nd == nil {
		if everything {
			return keepAll
		}
		return keep
	}
	for k := range nd.windows {
		kd := &nd.windows[k]
		if kd.since != 0 && t.UnixNano()-kd.readAt > int64(d.idle) {
			kd.since = 0
		}
		keep[k] = kd.since != 0
	}
	return keep
}

// ReadHistograms records that a reader read the newest histograms h of
// namespace's pods at now (the capacity signal reads all three), so that
// their scrapes parse them for the idle time to come
// (WithLatencyWindowIdle). A read of a quantile records its own family.
func (s *Store) ReadHistograms(namespace string, h Histograms, now time.Time) {
	s.demand.readHistograms(namespace, h, now)
}

// HistogramsRead returns the histogram families that namespace's pods'
// scrapes should parse at now: those read there within the idle time, and
// every one without an idle time or past the namespaces remembered.
func (s *Store) HistogramsRead(namespace string, now time.Time) Histograms {
	return s.demand.histograms(namespace, now)
}
