package provider

import "k8s.io/apimachinery/pkg/labels"

// What the external tests (package provider_test, which may import
// pkg/storesource) need of the provider's insides.

// MaxPodSets is maxPodSets.
const MaxPodSets = maxPodSets

// PodSetFor is the set a call about namespace and selector gets.
func (p *Provider) PodSetFor(namespace string, selector labels.Selector) (*PodSet, error) {
	return p.sets.get(namespace, selector)
}

// PodSetsKept is how many sets the provider keeps.
func (p *Provider) PodSetsKept() int {
	p.sets.mu.Lock()
	defer p.sets.mu.Unlock()
	return len(p.sets.sets)
}

// SetValues replaces the provider's source.
func (p *Provider) SetValues(v Values) { p.cfg.Values = v }

// SetCapacity gives the provider a capacity estimator.
func (p *Provider) SetCapacity(c CapacityEstimator) { p.cfg.Capacity = c }

// SetCapacityByRole gives the provider its roles' capacity estimators.
func (p *Provider) SetCapacityByRole(m map[Role]CapacityEstimator) { p.cfg.CapacityByRole = m }
