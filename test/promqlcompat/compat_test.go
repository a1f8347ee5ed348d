package promqlcompat

import (
	"context"
	"errors"
	"fmt"
	"math"
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

const window = time.Minute

// TestQuantileMatchesPromQL loads randomized TTFT series into Prometheus's
// query engine and checks histogram_quantile(q, rate(ttft_bucket[1m])) at
// several instants against pkg/signal/histogram:
//
//   - Quantile(q, ExtrapolatedIncrease(...)) must always match;
//   - Quantile(q, WindowIncrease(samples in (T-1m, T])) must match whenever
//     rate's extrapolation factor is the same for every bucket (the factor
//     then cancels out); where PromQL's zero-point clamp gives some buckets a
//     smaller factor, the difference is counted and logged, not failed;
//   - the adapter's store, holding the same samples, must always match
//     (store.TTFTIncrease, what the metrics API serves for one pod), and so
//     must its Pods list (store.HistQuantileHits, then HistQuantileEachOf
//     for what the memo left), listed twice with each quantile's memo so
//     that the second answer is the memo's wherever the memo may answer.
func TestQuantileMatchesPromQL(t *testing.T) {
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	var evals, uniform, diverged int
	for seed := range uint64(80) {
		sc := newScenario(seed)
		t.Run(fmt.Sprintf("%d-%s-%s", seed, sc.layout.name, sc.step), func(t *testing.T) {
			storage := promqltest.LoadedStorage(t, sc.load())
			samples := sc.seconds()
			st := store.New(len(samples))
			key := store.Key{Namespace: "ns", Name: "pod"}
			for _, smp := range samples {
				st.PutPod(key, signal.SourceInference, store.Sample{Time: smp.T, TTFT: smp.H})
			}
			lookup := store.NewLookup("ns", []string{key.Name})
			rng := rand.New(rand.NewPCG(seed, 1))
			for range 16 {
				at := evalTime(rng, sc)
				for _, q := range []float64{0.5, 0.9, 0.99} {
					want, ok := engineQuantile(t, engine, storage, q, at)
					got, uni, err := ours(samples, q, at)
					inc, stored := st.TTFTIncrease(key, at, window, time.Hour)
					if !ok {
						if !errors.Is(err, histogram.ErrTooFewSamples) {
							t.Fatalf("at %v q=%g: engine returned nothing, we returned err=%v", at, q, err)
						}
						if stored {
							t.Fatalf("at %v q=%g: engine returned nothing, the store an increase", at, q)
						}
						continue
					}
					if err != nil {
						t.Fatalf("at %v q=%g: %v", at, q, err)
					}
					want *= sc.layout.scale
					evals++
					if !same(got.extrapolated, want) {
						t.Errorf("at %v q=%g: ExtrapolatedIncrease gives %g, PromQL %g", at, q, got.extrapolated, want)
					}
					if !stored {
						t.Errorf("at %v q=%g: the store has no increase, PromQL %g", at, q, want)
					} else if v := histogram.Quantile(q, inc); !same(v, want) {
						t.Errorf("at %v q=%g: the store gives %g, PromQL %g", at, q, v, want)
					}
					for pass := range 2 {
						if v, listed := listed(st, lookup, q, at); !listed || !same(v, want) {
							t.Errorf("at %v q=%g: the store's list (pass %d) gives %g (listed %v), PromQL %g", at, q, pass, v, listed, want)
						}
					}
					if uni {
						uniform++
						if !same(got.plain, want) {
							t.Errorf("at %v q=%g (uniform extrapolation): WindowIncrease gives %g, PromQL %g", at, q, got.plain, want)
						}
					} else if !same(got.plain, want) {
						diverged++
					}
				}
			}
		})
	}
	t.Logf("%d evaluations; %d with a common extrapolation factor, all equal; %d of the rest differ from WindowIncrease", evals, uniform, diverged)
	if uniform == 0 || uniform == evals {
		t.Errorf("scenarios do not cover both extrapolation cases: %d of %d uniform", uniform, evals)
	}
}

// listed is the store's Pods-list answer for lookup's one pod, with the
// lookup's memo of q.
func listed(st *store.Store, lookup *store.Lookup, q float64, at time.Time) (v float64, ok bool) {
	memo := lookup.Quantiles(signal.HistTTFT, q, window)
	if !memo.TryAcquire() {
		panic("the test's memo is held")
	}
	defer memo.Release()
	fn := func(_ int, _ *store.Sample, got float64) { v, ok = got, true }
	misses := st.HistQuantileHits(lookup, signal.HistTTFT, q, memo, at, window, time.Hour, fn)
	st.HistQuantileEachOf(lookup, signal.HistTTFT, q, memo, misses, at, window, time.Hour, fn)
	return v, ok
}

// evalTime picks an instant from 30s to the end: on a scrape (so that the
// range start falls on one, which the left-open range excludes), just off
// one, or anywhere.
func evalTime(rng *rand.Rand, sc scenario) time.Time {
	step := sc.step.Milliseconds()
	k := 30_000/step + rng.Int64N(int64(len(sc.samples))-30_000/step)
	offsets := []int64{0, 1, -1, step / 2, step / 10, rng.Int64N(step)}
	return time.UnixMilli(k*step + offsets[rng.IntN(len(offsets))])
}

func engineQuantile(t *testing.T, engine *promql.Engine, db storage.Queryable, q float64, at time.Time) (float64, bool) {
	t.Helper()
	ctx := context.Background()
	expr := fmt.Sprintf("histogram_quantile(%g, rate(ttft_bucket[%s]))", q, model(window))
	qry, err := engine.NewInstantQuery(ctx, db, nil, expr, at)
	if err != nil {
		t.Fatal(err)
	}
	defer qry.Close()
	res := qry.Exec(ctx)
	vec, err := res.Vector()
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

type results struct{ extrapolated, plain float64 }

// ours computes the quantile both ways and reports whether every bucket
// with an increase got the same extrapolation factor.
func ours(samples []histogram.Sample, q float64, at time.Time) (results, bool, error) {
	ext, err := histogram.ExtrapolatedIncrease(samples, at, window)
	if err != nil {
		return results{}, false, err
	}
	var in []*histogram.Histogram
	for _, s := range samples {
		if s.T.After(at.Add(-window)) && !s.T.After(at) {
			in = append(in, s.H)
		}
	}
	plain, err := histogram.WindowIncrease(in)
	if err != nil {
		return results{}, false, err
	}
	uniform, factor := true, math.NaN()
	for i, c := range plain.Counts {
		if c == 0 {
			continue
		}
		f := ext.Counts[i] / c
		if !math.IsNaN(factor) && !same(f, factor) {
			uniform = false
		}
		factor = f
	}
	return results{histogram.Quantile(q, ext), histogram.Quantile(q, plain)}, uniform, nil
}

// same compares within 1e-9 relative; NaN equals NaN.
func same(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	if a == b {
		return true
	}
	return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))
}
