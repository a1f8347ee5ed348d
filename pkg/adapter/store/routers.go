package store

import (
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal"
)

// Bounds on the (router, model) counts the store keeps: a router may name
// up to 4,096 models a scrape (inference.MaxRouterModels), and a namespace
// may run thousands of router pods, each kept as long as it lives. A
// gateway fronting a few hundred LoRA adapters on a few replicas is well
// within them.
const (
	// MaxHeldModelsPerNamespace bounds the counts of one namespace's
	// routers, all models of all router pods together.
	MaxHeldModelsPerNamespace = 8192
	// MaxHeldModels bounds them over every namespace.
	MaxHeldModels = 65536
)

// ErrHeldModels is wrapped by PutRouter's error when a sample would take a
// namespace's routers, or all routers, past their bound.
var ErrHeldModels = errors.New("too many models held by routers")

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
// than the one held. The store keeps its own copy of Held. A sample that
// would take its namespace's routers past MaxHeldModelsPerNamespace counts,
// or all routers past MaxHeldModels, is refused with an error wrapping
// ErrHeldModels: the router's previous sample, if any, stays until it is
// stale, and the routers kept go on being served.
func (s *Store) PutRouter(k Key, smp RouterSample) error {
	held := make(map[string]float64, len(smp.Held))
	for model, v := range smp.Held {
		if signal.QueueDepth.Check(v) == nil {
			held[model] = v
		}
	}
	smp.Held = held
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.routers[k.Namespace]
	prev, had := ns[k.Name]
	if had && !smp.Time.After(prev.Time) {
		return nil
	}
	grow := len(held) - len(prev.Held)
	switch {
	case grow > 0 && s.heldModels[k.Namespace]+grow > MaxHeldModelsPerNamespace:
		return fmt.Errorf("%w: namespace %s's routers hold counts for %d models, %d more would pass the %d kept per namespace",
			ErrHeldModels, k.Namespace, s.heldModels[k.Namespace], grow, MaxHeldModelsPerNamespace)
	case grow > 0 && s.heldTotal+grow > MaxHeldModels:
		return fmt.Errorf("%w: routers hold counts for %d models, %d more would pass the %d kept", ErrHeldModels, s.heldTotal, grow, MaxHeldModels)
	}
	if ns == nil {
		ns = map[string]RouterSample{}
		s.routers[k.Namespace] = ns
	}
	ns[k.Name] = smp
	s.countHeldLocked(k.Namespace, grow)
	return nil
}

// countHeldLocked adds n to namespace's count of held models.
func (s *Store) countHeldLocked(namespace string, n int) {
	s.heldTotal += n
	if s.heldModels[namespace] += n; s.heldModels[namespace] <= 0 {
		delete(s.heldModels, namespace)
	}
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
				s.countHeldLocked(nsName, -len(smp.Held))
				n++
			}
		}
		if len(ns) == 0 {
			delete(s.routers, nsName)
		}
	}
	return n
}
