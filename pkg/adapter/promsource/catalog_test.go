package promsource

import (
	"slices"
	"testing"

	"github.com/gpuscale/gpuscale/pkg/provider"
)

// TestEveryServedMetricHasAPodQuery walks the provider's catalog (derived
// from pkg/signal's tables): every served metric has a compiled-in pod
// query, so that a signal added to the table is served under
// --source=prometheus too, and no pod query is of a metric not served.
func TestEveryServedMetricHasAPodQuery(t *testing.T) {
	q := DefaultQueries()
	var served []string
	for _, m := range provider.Metrics() {
		served = append(served, m.Name)
		if q.Pods[m.Name] == "" {
			t.Errorf("metric %s: no default pod query", m.Name)
		}
		if m.IsQuantile() && q.Workload[m.Name] == "" {
			t.Errorf("metric %s: a latency quantile without a default workload query", m.Name)
		}
	}
	for name := range q.Pods {
		if !slices.Contains(served, name) {
			t.Errorf("default pod query for %s, which is not served", name)
		}
	}
}
