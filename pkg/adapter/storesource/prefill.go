package storesource

import (
	"context"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

var (
	_ provider.PrefillHistograms = (*Source)(nil)
	_ provider.TTFTHistograms    = (*Source)(nil)
	_ provider.ITLHistograms     = (*Source)(nil)
)

// PodPrefill implements provider.PrefillHistograms: each pod's newest
// cumulative prefill-time histogram, nil where its newest inference sample
// is stale, serves another model than sel names, or has none.
func (s *Source) PodPrefill(_ context.Context, set *provider.PodSet, sel labels.Selector) ([]*histogram.Histogram, error) {
	s.read(set, store.HistogramsPrefill)
	return s.newest(set, sel, func(smp *store.Sample) *histogram.Histogram { return smp.Prefill }), nil
}

// read records that the newest histograms h of set's pods were read, so
// that their scrapes parse them (store.ReadHistograms).
func (s *Source) read(set *provider.PodSet, h store.Histograms) {
	now := s.now()
	if set.Namespace != "" {
		s.st.ReadHistograms(set.Namespace, h, now)
		return
	}
	seen := map[string]bool{}
	for _, pod := range set.Pods {
		if !seen[pod.Namespace] {
			seen[pod.Namespace] = true
			s.st.ReadHistograms(pod.Namespace, h, now)
		}
	}
}

// PodTTFT implements provider.TTFTHistograms as PodPrefill does, with the
// cumulative time-to-first-token histograms.
func (s *Source) PodTTFT(_ context.Context, set *provider.PodSet, sel labels.Selector) ([]*histogram.Histogram, error) {
	s.read(set, store.HistogramsTTFT)
	return s.newestHist(set, sel, signal.HistTTFT), nil
}

// PodITL implements provider.ITLHistograms as PodPrefill does, with the
// cumulative inter-token latency histograms.
func (s *Source) PodITL(_ context.Context, set *provider.PodSet, sel labels.Selector) ([]*histogram.Histogram, error) {
	s.read(set, store.HistogramsITL)
	return s.newestHist(set, sel, signal.HistITL), nil
}

// newest is each pod's histogram of the kind of, from its newest fresh
// inference sample serving a model sel matches; nil where there is none.
func (s *Source) newest(set *provider.PodSet, sel labels.Selector, of func(*store.Sample) *histogram.Histogram) []*histogram.Histogram {
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
		s.st.LatestEach(lookup, signal.SourceInference, now, s.maxStaleness, keep)
		return out
	}
	for i, pod := range set.Pods {
		if smp, ok := s.st.Latest(store.Key{Namespace: pod.Namespace, Name: pod.Name}, signal.SourceInference, now, s.maxStaleness); ok {
			keep(i, &smp)
		}
	}
	return out
}

// newestHist is newest for a latency histogram (TTFT, ITL), which the store
// keeps in its windows rather than in the newest sample.
func (s *Source) newestHist(set *provider.PodSet, sel labels.Selector, k signal.Hist) []*histogram.Histogram {
	if set.Namespace == "" {
		// Latest gives each sample with its histograms.
		return s.newest(set, sel, func(smp *store.Sample) *histogram.Histogram { return smp.Hist(k) })
	}
	out := make([]*histogram.Histogram, len(set.Pods))
	mm := newModelMatcher(sel)
	lookup := provider.Memo(set, s.lookup, func() *store.Lookup { return store.NewLookup(set.Namespace, set.Names()) })
	s.st.LatestHistEach(lookup, signal.SourceInference, k, s.now(), s.maxStaleness, func(i int, smp *store.Sample, h *histogram.Histogram) {
		if mm.matches(smp.Model) {
			out[i] = h
		}
	})
	return out
}
