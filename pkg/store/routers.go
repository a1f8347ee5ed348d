package store

import (
	"maps"
	"time"
)

// RouterSample is one scrape of a router or gateway that holds requests
// for models with no ready replica: how many it holds per model. A router
// has no window: the held count is read from its newest sample only.
type RouterSample struct {
	Time time.Time
	// Held is the number of requests held per model the router names, 0
	// included. PutRouter drops a count outside QueueDepth's range.
	Held map[string]float64
}

// PutRouter records a router pod's newest sample, unless it is not newer
// than the one held. The store keeps its own copy of Held.
func (s *Store) PutRouter(k Key, smp RouterSample) {
	held := make(map[string]float64, len(smp.Held))
	for model, v := range smp.Held {
		if QueueDepth.Check(v) == nil {
			held[model] = v
		}
	}
	smp.Held = held
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.routers[k.Namespace]
	if ns == nil {
		ns = map[string]RouterSample{}
		s.routers[k.Namespace] = ns
	}
	if prev, ok := ns[k.Name]; ok && !smp.Time.After(prev.Time) {
		return
	}
	ns[k.Name] = smp
}

// LatestRouter returns a router pod's newest sample if it is no older than
// maxAge at now; a router whose scrapes stopped says nothing, never a fresh
// zero. The copy is safe to keep.
func (s *Store) LatestRouter(k Key, now time.Time, maxAge time.Duration) (RouterSample, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	smp, ok := s.routers[k.Namespace][k.Name]
	if !ok || smp.Time.IsZero() || now.Sub(smp.Time) > maxAge {
		return RouterSample{}, false
	}
	smp.Held = maps.Clone(smp.Held)
	return smp, true
}

// forgetRoutersLocked drops the routers whose newest sample is older than
// maxAge, returning how many.
func (s *Store) forgetRoutersLocked(now time.Time, maxAge time.Duration) int {
	n := 0
	for nsName, ns := range s.routers {
		for pod, smp := range ns {
			if now.Sub(smp.Time) > maxAge {
				delete(ns, pod)
				n++
			}
		}
		if len(ns) == 0 {
			delete(s.routers, nsName)
		}
	}
	return n
}
