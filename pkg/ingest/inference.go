package ingest

import (
	dto "github.com/prometheus/client_model/go"

	"github.com/gpuscale/gpuscale/pkg/inference"
	"github.com/gpuscale/gpuscale/pkg/store"
)

// Inference maps one inference server scrape onto a store sample. It fails
// when the server speaks no known dialect.
func Inference(families map[string]*dto.MetricFamily) (store.Sample, inference.Dialect, error) {
	sig, err := inference.Detect(families)
	if err != nil {
		return store.Sample{}, "", err
	}
	var s store.Sample
	if sig.QueueDepth != nil {
		s.Set(store.QueueDepth, *sig.QueueDepth)
	}
	if sig.Running != nil {
		s.Set(store.RequestsRunning, *sig.Running)
	}
	if sig.KVCacheUtilization != nil {
		s.Set(store.KVCacheUtilization, *sig.KVCacheUtilization)
	}
	s.TTFT = sig.TTFT
	s.Model = sig.Model
	return s, sig.Dialect, nil
}
