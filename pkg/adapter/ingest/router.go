package ingest

import (
	"errors"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuscale/gpuscale/pkg/adapter/inference"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
)

// routerFamilies are the families Router reads, checked for duplicate
// series.
var routerFamilies, _ = inference.RouterFamilies()

// ReasonTooManyModels is the scrape-level reason for a router naming more
// than inference.MaxRouterModels models.
const ReasonTooManyModels = "too_many_models"

// Router maps one router or gateway scrape onto a store.RouterSample: the
// requests it holds per model. It fails when the scrape is of no known
// router, holds a series twice, or names too many models; Rejected lists
// the series not stored, whose models are left out of the sample.
func Router(families map[string]*dto.MetricFamily) (store.RouterSample, inference.Dialect, []Rejection, error) {
	seen := newSeriesSet()
	for _, name := range routerFamilies {
		for _, m := range families[name].GetMetric() {
			if err := seen.add(name, m); err != nil {
				return store.RouterSample{}, "", nil, err
			}
		}
	}
	sig, err := inference.DetectRouter(families)
	if err != nil {
		return store.RouterSample{}, "", nil, err
	}
	rejected := make([]Rejection, 0, len(sig.Rejected))
	for _, r := range sig.Rejected {
		rejected = append(rejected, rejection(r.Series, r.Err))
	}
	return store.RouterSample{Held: sig.Held}, sig.Dialect, rejected, nil
}

// routerReason maps Router's own scrape-level errors to their reasons.
func routerReason(err error) string {
	switch {
	case errors.Is(err, inference.ErrUnknownRouter):
		return ReasonUnknownDialect
	case errors.Is(err, inference.ErrTooManyModels):
		return ReasonTooManyModels
	}
	return ""
}
