package storesource

import (
	"context"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/pkg/histogram"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/store"
)

var (
	_ provider.PrefillHistograms = (*Source)(nil)
	_ provider.TTFTHistograms    = (*Source)(nil)
)

// PodPrefill implements provider.PrefillHistograms: each pod's newest
// cumulative prefill-time histogram, nil where its newest inference sample
// is stale, serves another model than sel names, or has none.
func (s *Source) PodPrefill(_ context.Context, set *provider.PodSet, sel labels.Selector) ([]*histogram.Histogram, error) {
	return s.podHistograms(set, sel, func(smp *store.Sample) *histogram.Histogram { return smp.Prefill })
}

// PodTTFT implements provider.TTFTHistograms: each pod's newest cumulative
// time-to-first-token histogram, nil where its newest inference sample is
// stale, serves another model than sel names, or has none.
func (s *Source) PodTTFT(_ context.Context, set *provider.PodSet, sel labels.Selector) ([]*histogram.Histogram, error) {
	return s.podHistograms(set, sel, func(smp *store.Sample) *histogram.Histogram { return smp.TTFT })
}

func (s *Source) podHistograms(set *provider.PodSet, sel labels.Selector, of func(*store.Sample) *histogram.Histogram) ([]*histogram.Histogram, error) {
	now := s.now()
	out := make([]*histogram.Histogram, len(set.Pods))
	mm := newModelMatcher(sel)
	keep := func(i int, smp *store.Sample) {
		if mm.matches(smp.Model) {
			out[i] = of(smp)
		}
	}
	if set.Namespace != "" {
		// One store pass under one lock, with the pods' places shared
		// with the Pods reads of the same set (the capacity signal's
		// three inputs).
		lookup := provider.Memo(set, s.lookup, func() *store.Lookup { return store.NewLookup(set.Namespace, set.Names()) })
		s.st.LatestEach(lookup, store.SourceInference, now, s.maxStaleness, keep)
		return out, nil
	}
	for i, pod := range set.Pods {
		if smp, ok := s.st.Latest(store.Key{Namespace: pod.Namespace, Name: pod.Name}, store.SourceInference, now, s.maxStaleness); ok {
			keep(i, &smp)
		}
	}
	return out, nil
}
