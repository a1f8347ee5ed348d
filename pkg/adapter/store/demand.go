package store

import (
	"sync"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal"
)

// demand is who reads the latency windows. Only the TTFT and ITL
// quantiles read more than a pod's newest histogram (the capacity signal
// reads the newest alone), and a cluster that autoscales on the capacity
// signal reads neither quantile, or only one: a window of either kind costs
// about 1 KiB a pod (14 packed histograms at the default minute and 5 s
// scrape), which no signal reads. With an idle time set
// (WithLatencyWindowIdle), a namespace keeps a kind's window from the
// first read of its quantiles there until that long passes without one,
// and otherwise keeps its newest histogram alone.
//
// A window started by a read holds only what came after it, so its
// quantiles are answered only once it spans a whole window (ready): until
// then an answer would cover less time than PromQL's over the same
// samples, and a smaller window is not the value asked for.
type demand struct {
	// idle is how long a window is kept without reads; 0 keeps every
	// window, and answers from the first two samples on.
	idle time.Duration
	mu   sync.Mutex
	ns   map[string]*[signal.NumHists]kindDemand
}

// kindDemand is one namespace's demand for one kind's window, in Unix
// nanoseconds.
type kindDemand struct {
	// since is when the window was started by a read, 0 while not kept.
	since int64
	// readAt is the newest read's time.
	readAt int64
}

// keepAll keeps every kind's window.
var keepAll = func() (keep [signal.NumHists]bool) {
	for k := range keep {
		keep[k] = true
	}
	return keep
}()

// maxDemandNamespaces bounds the namespaces whose reads are remembered: a
// read names its namespace, and a client may name many. Past it every
// window of a new namespace is kept, as with no idle time.
const maxDemandNamespaces = 4096

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
	kinds := d.ns[namespace]
	if kinds == nil {
		if len(d.ns) >= maxDemandNamespaces {
			d.forget(t)
		}
		if len(d.ns) >= maxDemandNamespaces {
			return true
		}
		if d.ns == nil {
			d.ns = map[string]*[signal.NumHists]kindDemand{}
		}
		kinds = &[signal.NumHists]kindDemand{}
		d.ns[namespace] = kinds
	}
	kd := &kinds[k]
	kd.readAt = max(kd.readAt, t)
	if kd.since == 0 {
		kd.since = t
	}
	return t-kd.since >= int64(win)
}

// forget drops the namespaces not read for the idle time at t. The caller
// holds mu.
func (d *demand) forget(t int64) {
	for ns, kinds := range d.ns {
		newest := int64(0)
		for k := range kinds {
			newest = max(newest, kinds[k].readAt)
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
	kinds := d.ns[namespace]
	if kinds == nil {
		if len(d.ns) >= maxDemandNamespaces {
			return keepAll
		}
		return keep
	}
	idle := true
	for k := range kinds {
		kd := &kinds[k]
		if kd.since != 0 && t.UnixNano()-kd.readAt > int64(d.idle) {
			kd.since = 0
		}
		keep[k] = kd.since != 0
		idle = idle && !keep[k]
	}
	if idle {
		delete(d.ns, namespace)
	}
	return keep
}
