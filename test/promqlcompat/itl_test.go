package promqlcompat

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/storage"

	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// TestITLQuantileMatchesPromQL holds the inter-token latency quantiles to
// the exactness of TTFT's (TestQuantileMatchesPromQL): randomized ITL
// series in the servers' own layouts (vLLM's and SGLang's token gaps, TGI's
// time per token), with restarts, missed scrapes, idle stretches and warm
// counters, are loaded into Prometheus's query engine and into the
// adapter's store as the ITL histogram of two pods, and at several instants
//
//   - each pod's served quantile (store.HistIncrease of the ITL kind, then
//     histogram.Quantile: what storesource serves for a pod) equals
//     histogram_quantile(q, rate(itl_bucket{pod="a"}[1m]));
//   - the workload's (the pods' increases merged, as storesource serves a
//     Deployment or a model) equals
//     histogram_quantile(q, sum by (le) (rate(itl_bucket[1m]))),
//
// within 1e-9, whenever PromQL has a value, and the store has none when
// PromQL has none.
func TestITLQuantileMatchesPromQL(t *testing.T) {
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	var evals, merged int
	for seed := range uint64(45) {
		a := scenarioOf(seed, itlLayouts)
		b := scenarioWith(seed+1000, []layout{a.layout}, a.step)
		t.Run(fmt.Sprintf("%d-%s-%s", seed, a.layout.name, a.step), func(t *testing.T) {
			db := promqltest.LoadedStorage(t, "load "+model(a.step)+"\n"+a.series("itl_bucket", `pod="a"`)+b.series("itl_bucket", `pod="b"`))
			st := store.New(len(a.samples) + 1)
			keys := []store.Key{{Namespace: "ns", Name: "a"}, {Namespace: "ns", Name: "b"}}
			for i, sc := range []scenario{a, b} {
				for _, smp := range sc.seconds() {
					// A TTFT of its own beside: the kinds must not mix.
					st.PutPod(keys[i], signal.SourceInference, store.Sample{Time: smp.T, ITL: smp.H, TTFT: decoy(smp.H)})
				}
			}
			rng := rand.New(rand.NewPCG(seed, 2))
			for range 12 {
				at := evalTime(rng, a)
				for _, q := range []float64{0.5, 0.9, 0.99} {
					var incs []*histogram.Histogram
					for i, pod := range []string{"a", "b"} {
						want, ok := instant(t, engine, db, fmt.Sprintf(`histogram_quantile(%g, rate(itl_bucket{pod=%q}[%s]))`, q, pod, model(window)), at)
						inc, stored := st.HistIncrease(keys[i], signal.HistITL, at, window, time.Hour)
						if ok != stored {
							t.Fatalf("pod %s at %v q=%g: PromQL has a value %v, the store an increase %v", pod, at, q, ok, stored)
						}
						if !ok {
							continue
						}
						evals++
						incs = append(incs, inc)
						if got := histogram.Quantile(q, inc); !same(got, want) {
							t.Errorf("pod %s at %v q=%g: served %g, PromQL %g", pod, at, q, got, want)
						}
					}
					want, ok := instant(t, engine, db, fmt.Sprintf(`histogram_quantile(%g, sum by (le) (rate(itl_bucket[%s])))`, q, model(window)), at)
					if ok != (len(incs) > 0) {
						t.Fatalf("workload at %v q=%g: PromQL has a value %v, %d pods an increase", at, q, ok, len(incs))
					}
					if !ok {
						continue
					}
					m, err := histogram.Merge(incs...)
					if err != nil {
						t.Fatal(err)
					}
					merged++
					if got := histogram.Quantile(q, m); !same(got, want) {
						t.Errorf("workload at %v q=%g: served %g, PromQL %g", at, q, got, want)
					}
				}
			}
		})
	}
	t.Logf("%d pod and %d workload evaluations equal to PromQL's", evals, merged)
	if evals == 0 || merged == 0 {
		t.Error("no evaluation had a value")
	}
}

// decoy is a TTFT histogram of another layout and other counts: were the
// store to answer ITL from it, every comparison would fail.
func decoy(h *histogram.Histogram) *histogram.Histogram {
	return &histogram.Histogram{Bounds: []float64{1, 2, inf}, Counts: []float64{h.Count, 2 * h.Count, 3 * h.Count}, Count: 3 * h.Count}
}

// instant evaluates expr at at, false when it returns nothing.
func instant(t *testing.T, engine *promql.Engine, db storage.Queryable, expr string, at time.Time) (float64, bool) {
	t.Helper()
	ctx := context.Background()
	qry, err := engine.NewInstantQuery(ctx, db, nil, expr, at)
	if err != nil {
		t.Fatal(err)
	}
	defer qry.Close()
	vec, err := qry.Exec(ctx).Vector()
	if err != nil {
		t.Fatal(err)
	}
	switch len(vec) {
	case 0:
		return 0, false
	case 1:
		return vec[0].F, true
	}
	t.Fatalf("%s returned %d series", expr, len(vec))
	return 0, false
}
