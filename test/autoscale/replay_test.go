// Package autoscale replays a short slice of the recorded production trace
// through the local control plane under every autoscaling policy, as
// `make bench-autoscale` does for the whole hour (docs/autoscaling.md). It
// needs the control-plane binaries and runs when GPUSCALE_E2E=1 (make e2e,
// make test, CI), after the end-to-end suite: both serve the adapter on
// the environment's adapter port (6443 unless devenv.AdapterPortEnv says).
package autoscale

import (
	"context"
	"encoding/json"
	"image/png"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/autoscalebench"
	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/internal/harness/devenv"
)

// The slice: three minutes of the synthetic code-completion workload, as
// its load climbs. Queue depth waits for a queue, so it adds replicas a
// start-up too late for the climb and loses a minute; the recommended
// signal, which sizes for the demand a start-up ahead, holds every minute
// static provisioning holds. The offline replay agrees at every HPA sync
// phase (go run ./hack/offline-replay
// --trace=test/traces/synthetic-code-completion.csv --start=9m
// --duration=3m --sync-phase=2s|7s|12s), with queue depth's lost minute at
// a p90 of 1.16 s against the 1 s SLO. The slice from 6m lost it at
// 1.02 s, too close to the SLO for a real-time replay: on a loaded
// machine queue depth once held it (0.92 s) and the check failed.
//
// This slice shows a difference between the two policies. It does not
// prove the recommended policy generally better: docs/autoscaling.md,
// "Robustness", says where it is not.
const tracePath = "../traces/synthetic-code-completion.csv"

const (
	sliceStart    = 9 * time.Minute
	sliceDuration = 3 * time.Minute
)

// attempts bounds the slice's replays. A replay's minutes are judged in
// real time, so a machine too loaded to serve the slice on time (a cold CI
// run compiling beside it) loses minutes under every policy. Static
// provisioning is the control: the offline sizing says which minutes it
// meets (plan.StaticMet), and a replay in which it met fewer measured the
// machine, not the policies, so the slice is replayed again before any
// policy is judged.
const attempts = 2

func TestReplayShortSlice(t *testing.T) {
	if os.Getenv("GPUSCALE_E2E") != "1" {
		t.Skip("GPUSCALE_E2E is not 1; the replay runs through `make e2e` (part of `make test`)")
	}
	tr, err := trace.ReadFile(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	cfg := autoscalebench.DefaultConfig(tracePath, tr)
	cfg.Start, cfg.Duration = sliceStart, sliceDuration
	cfg.Log = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	plan, err := autoscalebench.NewPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests; static need %d replicas (SLO met in %d of %d minutes), start at %d, HPAs 1-%d",
		len(plan.Requests), plan.Static, plan.StaticMet, plan.Minutes, plan.Initial, plan.MaxReplicas)

	var (
		rec       *autoscalebench.Recording
		summaries []autoscalebench.Summary
		sums      map[string]autoscalebench.Summary
	)
	for attempt := 1; ; attempt++ {
		rec = replaySlice(t, cfg, plan)
		summaries = autoscalebench.Summarize(*rec)
		sums = map[string]autoscalebench.Summary{}
		for _, s := range summaries {
			sums[s.Policy] = s
		}
		static := sums[autoscalebench.PolicyStatic]
		if static.MinutesMet >= plan.StaticMet {
			break
		}
		if attempt == attempts {
			t.Fatalf("static provisioning met the SLO in %d of %d minutes in each of %d replays, where its offline sizing meets %d: "+
				"the machine could not serve the slice on time, so no policy can be judged", static.MinutesMet, static.Minutes, attempts, plan.StaticMet)
		}
		t.Logf("replay %d: static provisioning met %d of %d minutes, its sizing %d: the machine was too loaded to judge; replaying the slice again",
			attempt, static.MinutesMet, static.Minutes, plan.StaticMet)
	}

	out := filepath.Join("..", "..", "_output", "bench-autoscale-short")
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	if err := autoscalebench.WriteReport(out, *rec); err != nil {
		t.Fatal(err)
	}
	checkReportFiles(t, out, cfg.Policies)

	for _, s := range summaries {
		t.Logf("FIGURE replay %s: TTFT p50 %.3fs p90 %.3fs p99 %.3fs, SLO minutes %d/%d, GPU-hours %.3f (%.0f%% of static), scale-ups %d, scale-downs %d, peak %d, unserved %d",
			s.Policy, s.TTFTP50, s.TTFTP90, s.TTFTP99, s.MinutesMet, s.Minutes, s.GPUHours, 100*s.StaticFraction, s.ScaleUps, s.ScaleDowns, s.PeakReplicas, s.Unserved)
		if s.Served+s.Unserved+s.Rejected != len(plan.Requests) {
			t.Errorf("%s: %d served + %d unserved + %d rejected, want the slice's %d requests", s.Policy, s.Served, s.Unserved, s.Rejected, len(plan.Requests))
		}
		if s.Minutes != plan.Minutes {
			t.Errorf("%s: %d minutes judged, want %d", s.Policy, s.Minutes, plan.Minutes)
		}
	}
	for _, p := range rec.Policies {
		if len(p.Samples) < 10 {
			t.Errorf("%s: %d samples of its replicas, want one every %v of the %v slice", p.Policy, len(p.Samples), cfg.SampleEvery, sliceDuration)
		}
	}
	queue, static := sums[autoscalebench.PolicyQueueDepth], sums[autoscalebench.PolicyStatic]
	// The recommended signal (the README's first example) holds the SLO
	// in every minute static provisioning holds, in strictly more than
	// queue depth, and serves every request.
	recommended := sums[autoscalebench.Recommended]
	t.Logf("FIGURE recommended vs queue-depth: %d vs %d SLO minutes (static %d) on %.3f vs %.3f GPU-hours",
		recommended.MinutesMet, queue.MinutesMet, static.MinutesMet, recommended.GPUHours, queue.GPUHours)
	if recommended.MinutesMet < static.MinutesMet || recommended.MinutesMet <= queue.MinutesMet || recommended.Unserved > 0 {
		t.Errorf("recommended policy: %d SLO minutes, %d unserved; static %d, queue depth %d; want static's minutes, more than queue depth's and none unserved",
			recommended.MinutesMet, recommended.Unserved, static.MinutesMet, queue.MinutesMet)
	}
	// The static policy runs exactly its size for the whole slice.
	if static.PeakReplicas != plan.Static || static.ScaleUps+static.ScaleDowns != 0 {
		t.Errorf("static policy: peak %d replicas, %d scale events; want %d and none", static.PeakReplicas, static.ScaleUps+static.ScaleDowns, plan.Static)
	}
}

// replaySlice replays plan once under every policy on a control plane of
// its own, torn down before it returns.
func replaySlice(t *testing.T, cfg autoscalebench.Config, plan *autoscalebench.Plan) *autoscalebench.Recording {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	clock := autoscalebench.NewClock(cfg.Speedup)
	env, err := devenv.Up(ctx, plan.EnvOptions(t.TempDir(), clock, cfg.Log))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Down(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	}()
	rec, stats, err := autoscalebench.Run(ctx, env, plan, clock)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dispatch lag p99 %v, max %v; requests with no ready replica %d", stats.DispatchLagP99, stats.DispatchLagMax, stats.NoBackend)
	return rec
}

// checkReportFiles: the report, its JSON and every plot exist and parse.
func checkReportFiles(t *testing.T, dir string, policies []string) {
	t.Helper()
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range policies {
		if !strings.Contains(string(md), "| "+p+" |") {
			t.Errorf("report.md has no row for %s", p)
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(raw) {
		t.Error("report.json is not valid JSON")
	}
	for _, name := range append(policies, "comparison") {
		f, err := os.Open(filepath.Join(dir, name+".png"))
		if err != nil {
			t.Error(err)
			continue
		}
		img, err := png.Decode(f)
		f.Close()
		switch {
		case err != nil:
			t.Errorf("%s.png: %v", name, err)
		case img.Bounds().Dx() < 400:
			t.Errorf("%s.png is %v, want a full-size plot", name, img.Bounds())
		}
		svg, err := os.ReadFile(filepath.Join(dir, name+".svg"))
		if err != nil || !strings.Contains(string(svg), "<svg") {
			t.Errorf("%s.svg: %v, want an SVG document", name, err)
		}
	}
}
