package provider

import "k8s.io/apimachinery/pkg/labels"

// What the external tests (package provider_test, which may import
// pkg/adapter/storesource) need of the provider's insides.

// MaxPodSets is maxPodSets, MaxPodSetsPerNamespace maxPodSetsPerNamespace.
const (
	MaxPodSets             = maxPodSets
	MaxPodSetsPerNamespace = maxPodSetsPerNamespace
)

// PodSetFor is the set a call about namespace and selector gets.
func (p *Provider) PodSetFor(namespace string, selector labels.Selector) (*PodSet, error) {
	return p.sets.get(namespace, selector)
}

// PodSetsKept is how many sets the provider keeps of namespace, of all
// namespaces for "".
func (p *Provider) PodSetsKept(namespace string) int {
	p.sets.mu.Lock()
	defer p.sets.mu.Unlock()
	n := 0
	for k := range p.sets.sets {
		if namespace == "" || k.namespace == namespace {
			n++
		}
	}
	return n
}

// SetValues replaces the provider's source.
func (p *Provider) SetValues(v Values) { p.cfg.Values = v }

// SetCapacity gives the provider a capacity estimator.
func (p *Provider) SetCapacity(c CapacityEstimator) { p.cfg.Capacity = c }

// SetCapacityByRole gives the provider its roles' capacity estimators.
func (p *Provider) SetCapacityByRole(m map[Role]CapacityEstimator) { p.cfg.CapacityByRole = m }
