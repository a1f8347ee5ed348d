package autoscale

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/autoscalebench"
	"github.com/gpuscale/gpuscale/internal/bench/offlinereplay"
	"github.com/gpuscale/gpuscale/internal/bench/robustness"
	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/internal/bench/workload"
	"github.com/gpuscale/gpuscale/internal/harness/devenv"
)

// The disaggregated slice (this file sorts after replay_test.go so that
// TestReplayShortSlice, timing-sensitive, keeps its place in the run): six minutes of the disaggregated workload from
// minute 5, as the first code-completion rush (prefill work) climbs beside
// the chat (decode work). `make bench-autoscale BENCH_FLAGS=--disaggregated`
// replays all 45 minutes (docs/autoscaling.md, "Prefill/decode
// disaggregation").
const (
	disaggStart    = 5 * time.Minute
	disaggDuration = 6 * time.Minute
)

// TestDisaggregatedShortSlice replays the slice on a prefill and a decode
// Deployment per policy through the real HPA controller and adapter: each
// request prefilled on a prefill replica, its KV cache moved, its tokens
// generated on a decode replica. Both autoscaled policies' HPAs must read
// their metrics and grow both pools with the load (the per-role policy's
// Object metric per pool, the single-pool policy's External metric of the
// model, which the pods serve under its Hugging Face id and the HPAs select
// by its label value), serve every request, and cut no stream when they
// scale down.
func TestDisaggregatedShortSlice(t *testing.T) {
	if os.Getenv("GPUSCALE_E2E") != "1" {
		t.Skip("GPUSCALE_E2E is not 1; the replay runs through `make e2e` (part of `make test`)")
	}
	w := workload.Disaggregated()
	reqs := (&trace.Trace{Requests: w.Generate(robustness.Seed)}).Slice(disaggStart, disaggDuration)
	bench := offlinereplay.NewDisaggBench(reqs, 2*time.Second, 150*time.Millisecond)
	static, offline, err := bench.Run()
	if err != nil {
		t.Fatal(err)
	}
	cfg := bench.Live(w.Name, static, 6)
	cfg.Log = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	plan, err := autoscalebench.NewDisaggPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests; static pools %v, autoscaled from %v up to %v", len(reqs), static, cfg.Initial, cfg.MaxReplicas)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	clock := autoscalebench.NewClock(cfg.Speedup)
	env, err := devenv.Up(ctx, plan.EnvOptions(t.TempDir(), clock, cfg.Log))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Down(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	rec, stats, err := autoscalebench.RunDisagg(ctx, env, plan, clock)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dispatch lag p99 %v, max %v; requests with no ready replica %d", stats.DispatchLagP99, stats.DispatchLagMax, stats.NoBackend)

	out := filepath.Join("..", "..", "_output", "bench-autoscale-disaggregated-short")
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	if err := autoscalebench.WriteDisaggReport(out, *rec); err != nil {
		t.Fatal(err)
	}
	checkDisaggReport(t, out)
	sums := autoscalebench.SummarizeDisagg(*rec)
	t.Logf("FIGURE disaggregated slice, control plane:\n%s\noffline replay:\n%s", autoscalebench.DisaggTable(*rec, sums), offlinereplay.DisaggTable(static, offline))

	minutes := 0
	for _, p90 := range offline[0].Result.P90 {
		if !math.IsNaN(p90) { // the minute had arrivals
			minutes++
		}
	}
	for i, s := range sums {
		p := rec.Policies[i]
		served := 0
		for _, r := range p.Requests {
			if r.Served {
				served++
			}
		}
		if served+s.Unserved+s.Rejected != len(reqs) || s.Unserved > 0 {
			t.Errorf("%s: %d served, %d unserved, %d rejected of %d requests; want every request served or rejected", s.Policy, served, s.Unserved, s.Rejected, len(reqs))
		}
		if s.AbortedStreams > 0 {
			t.Errorf("%s: %d streams cut by a scale-down; the pools drain", s.Policy, s.AbortedStreams)
		}
		if s.Minutes != minutes {
			t.Errorf("%s: %d minutes judged, the offline replay %d", s.Policy, s.Minutes, minutes)
		}
		for k := range p.Pools {
			if len(p.Pools[k]) < 10 {
				t.Errorf("%s pool %d: %d samples, want one every %v of the slice", s.Policy, k, len(p.Pools[k]), cfg.SampleEvery)
			}
		}
		switch s.Policy {
		case autoscalebench.DisaggStatic:
			if s.PoolPeak != static || s.ScaleUps+s.ScaleDowns != 0 {
				t.Errorf("static: peak pools %v and %d scale events, want %v and none", s.PoolPeak, s.ScaleUps+s.ScaleDowns, static)
			}
		default:
			// Both pools' work grows: an HPA that reads its metric
			// adds replicas to each.
			for k, peak := range s.PoolPeak {
				if peak <= cfg.Initial[k] {
					t.Errorf("%s: pool %d peaked at %d replicas, its start; want its HPA to grow it with the load", s.Policy, k, peak)
				}
			}
		}
	}
}

// checkDisaggReport: the report has a row per policy and the recording
// parses back.
func checkDisaggReport(t *testing.T, dir string) {
	t.Helper()
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range autoscalebench.DisaggPolicies {
		if !strings.Contains(string(md), "| "+p) {
			t.Errorf("report.md has no row for %s", p)
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, "recording.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec autoscalebench.DisaggRecording
	if err := json.Unmarshal(raw, &rec); err != nil || len(rec.Policies) != len(autoscalebench.DisaggPolicies) {
		t.Errorf("recording.json: %v, %d policies", err, len(rec.Policies))
	}
}
