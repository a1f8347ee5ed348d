package promsource

import (
	"strings"
	"testing"

	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/provider"
)

// TestDefaultQueriesReadEveryFeed walks gpu.Specs: every field that feeds
// a signal the provider serves is read, under each of its names, by the
// signal's pod query, and a mean's also by its node query.
func TestDefaultQueriesReadEveryFeed(t *testing.T) {
	q := DefaultQueries()
	for _, s := range gpu.Specs {
		if s.Feed == nil {
			continue
		}
		if _, ok := provider.MetricByName(s.Feed.Signal.Served()); !ok {
			t.Errorf("field %s feeds %s, which the provider does not serve", s.Name, s.Feed.Signal)
		}
		queries := map[string]string{"pods": q.Pods[s.Feed.Signal.Served()]}
		if s.Feed.Agg == gpu.Mean {
			queries["nodes"] = q.Nodes[s.Feed.Signal.Served()]
		}
		for kind, text := range queries {
			if text == "" {
				t.Errorf("field %s: no %s query for %s", s.Name, kind, s.Feed.Signal)
				continue
			}
			for i := range s.DCGM {
				for _, a := range s.DCGM[i].Aliases() {
					if !strings.Contains(text, a.Name+"{") {
						t.Errorf("field %s: the %s query of %s does not read %s", s.Name, kind, s.Feed.Signal, a.Name)
					}
				}
			}
		}
	}
}
