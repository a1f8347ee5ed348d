package ingest

import (
	"slices"
	"testing"

	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/gpu/dcgm"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// TestIngestEveryFeed walks gpu.Specs: every field that feeds a signal is
// read under each of its names, in each schema: a scrape holding only the
// fields with feeds, under one schema's names, gives a pod and its node
// every signal they feed (gpu_memory_utilization for the memory parts).
func TestIngestEveryFeed(t *testing.T) {
	families := GPUFamilies()
	for _, sc := range dcgm.Schemas {
		text := ""
		for _, s := range gpu.Specs {
			if s.Feed == nil {
				continue
			}
			for i := range s.DCGM {
				for _, a := range s.DCGM[i].Aliases() {
					if !slices.Contains(families, a.Name) {
						t.Errorf("field %s: GPUFamilies lacks %s", s.Name, a.Name)
					}
				}
			}
			name := s.DCGM[0].Name(sc)
			if name == "" {
				t.Errorf("field %s feeds %s but has no %s name", s.Name, s.Feed.Signal, sc)
				continue
			}
			// 1 in the series' unit: in range for every signal.
			text += dcgmSeries(name, "GPU-a", "p1", "1")
		}
		pods, node, rejected, err := GPU(parse(t, text))
		if err != nil || len(rejected) != 0 {
			t.Fatalf("%s: GPU = %v, rejected %v", sc, err, rejected)
		}
		for _, s := range gpu.Specs {
			if s.Feed == nil {
				continue
			}
			sig, ok := s.Feed.Signal, s.Feed.Signal < signal.NumSignals
			if !ok {
				t.Errorf("field %s feeds %s, which is no signal", s.Name, s.Feed.Signal)
				continue
			}
			for what, smp := range map[string]store.Sample{"pod": pods[p1], "node": node} {
				if _, ok := smp.Get(sig); !ok {
					t.Errorf("%s: field %s gives the %s no %s", sc, s.Name, what, sig)
				}
			}
		}
	}
}
