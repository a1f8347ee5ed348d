package ingest

import (
	"errors"
	"fmt"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuscale/gpuscale/pkg/adapter/inference"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// inferenceFamilies are the families Inference reads, checked for
// duplicate series.
var inferenceFamilies, _ = inference.Families()

// Inference maps one inference server scrape onto a store sample. It fails
// when the server speaks no known dialect, holds a series twice, or
// exposes a TTFT, ITL or prefill-time histogram that signal.CheckTTFT rejects: a
// histogram merged without one of its series would be another server's. Rejected lists the
// gauges not stored.
func Inference(families map[string]*dto.MetricFamily) (store.Sample, inference.Dialect, []Rejection, error) {
	seen := newSeriesSet()
	for _, name := range inferenceFamilies {
		for _, m := range families[name].GetMetric() {
			if err := seen.add(name, m); err != nil {
				return store.Sample{}, "", nil, err
			}
		}
	}
	sig, err := inference.Detect(families)
	if err != nil {
		return store.Sample{}, "", nil, err
	}
	var rejected []Rejection
	for _, r := range sig.Rejected {
		if errors.Is(r.Err, histogram.ErrInvalid) {
			return store.Sample{}, sig.Dialect, nil, fmt.Errorf("histogram %s: %w", truncate(r.Series), r.Err)
		}
		rejected = append(rejected, rejection(r.Series, r.Err))
	}
	var s store.Sample
	if sig.QueueDepth != nil {
		s.Set(signal.QueueDepth, *sig.QueueDepth)
	}
	if sig.Running != nil {
		s.Set(signal.RequestsRunning, *sig.Running)
	}
	if sig.KVCacheUtilization != nil {
		s.Set(signal.KVCacheUtilization, *sig.KVCacheUtilization)
	}
	s.TTFT = sig.TTFT
	s.Prefill = sig.Prefill
	s.ITL = sig.ITL
	s.Model = sig.Model
	return s, sig.Dialect, rejected, nil
}
