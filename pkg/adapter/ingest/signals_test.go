package ingest

import (
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/gpu/dcgm"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// TestEverySignalFilled walks pkg/signal's table: every GPU signal is
// filled, for the node and for every pod with a GPU, from gpuscale's own
// exporter's scrape (every field it renders, in either schema), and every
// inference signal and latency histogram from the scrape of some dialect
// the simulated inference server speaks. A signal in the table that no
// scrape fills would be served as never having a value.
func TestEverySignalFilled(t *testing.T) {
	for _, schema := range []dcgm.Schema{dcgm.Schema48, dcgm.Schema410} {
		pods, node, rejected, err := GPU(parse(t, string(gpuscaleExposition(t, schema))))
		if err != nil || len(rejected) != 0 || len(pods) == 0 {
			t.Fatalf("schema %v: %d pods, err %v, rejected %v", schema, len(pods), err, rejected)
		}
		for sig := range signal.NumSignals {
			if sig.Source() != signal.SourceGPU {
				continue
			}
			if _, ok := node.Get(sig); !ok {
				t.Errorf("signal %s (SourceGPU): the node's sample lacks it; no GPU field of schema %v fills it", sig, schema)
			}
			for k, smp := range pods {
				if _, ok := smp.Get(sig); !ok {
					t.Errorf("signal %s (SourceGPU): pod %s/%s's sample lacks it (schema %v)", sig, k.Namespace, k.Name, schema)
				}
			}
		}
	}

	var samples []store.Sample
	for _, d := range inferencesim.Dialects {
		body, err := inferencesim.Snapshot(inferencesim.Options{Dialect: d, Rate: 10, Seed: 1}, time.Minute)
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		smp, _, rejected, err := Inference(parse(t, string(body)))
		if err != nil || len(rejected) != 0 {
			t.Fatalf("%s: err %v, rejected %v", d, err, rejected)
		}
		samples = append(samples, smp)
	}
	for sig := range signal.NumSignals {
		if sig.Source() != signal.SourceInference {
			continue
		}
		filled := false
		for _, smp := range samples {
			_, ok := smp.Get(sig)
			filled = filled || ok
		}
		if !filled {
			t.Errorf("signal %s (SourceInference): no dialect's scrape fills it (dialects %v)", sig, inferencesim.Dialects)
		}
	}
	for h := range signal.NumHists {
		filled := false
		for _, smp := range samples {
			filled = filled || smp.Hist(h) != nil
		}
		if !filled {
			t.Errorf("histogram %s: no dialect's scrape fills it (dialects %v)", h, inferencesim.Dialects)
		}
	}
}

// TestFeedsAgreeWithSignals: a GPU field that feeds a signal combines its
// devices as the signal table combines a workload's pods (a mean's devices
// averaged, a sum's added up), feeds a GPU signal, and names it as the
// table does.
func TestFeedsAgreeWithSignals(t *testing.T) {
	for _, s := range gpu.Specs {
		if s.Feed == nil || s.Feed.Agg == gpu.Part {
			continue
		}
		sig, ok := s.Feed.Signal, s.Feed.Signal < signal.NumSignals
		if !ok {
			t.Errorf("field %s feeds %s, which is not in the signal table", s.Name, s.Feed.Signal)
			continue
		}
		want := map[gpu.Agg]signal.Aggregation{gpu.Mean: signal.Mean, gpu.Sum: signal.Sum}[s.Feed.Agg]
		if sig.Aggregation() != want || sig.Source() != signal.SourceGPU {
			t.Errorf("field %s feeds %s as a %v, which the signal table has as a %s from source %d", s.Name, sig, s.Feed.Agg, sig.Aggregation(), sig.Source())
		}
	}
}
