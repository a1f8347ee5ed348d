package storesource

import (
	"context"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/pkg/histogram"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/store"
)

var _ provider.PrefillHistograms = (*Source)(nil)

// PodPrefill implements provider.PrefillHistograms: each pod's newest
// cumulative prefill-time histogram, nil where its newest inference sample
// is stale, serves another model than sel names, or has none.
func (s *Source) PodPrefill(_ context.Context, set *provider.PodSet, sel labels.Selector) ([]*histogram.Histogram, error) {
	now := s.now()
	out := make([]*histogram.Histogram, len(set.Pods))
	mm := newModelMatcher(sel)
	for i, pod := range set.Pods {
		smp, ok := s.st.Latest(store.Key{Namespace: pod.Namespace, Name: pod.Name}, store.SourceInference, now, s.maxStaleness)
		if ok && mm.matches(smp.Model) {
			out[i] = smp.Prefill
		}
	}
	return out, nil
}
