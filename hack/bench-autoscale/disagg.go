package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/autoscalebench"
	"github.com/gpuscale/gpuscale/internal/bench/offlinereplay"
	"github.com/gpuscale/gpuscale/internal/bench/robustness"
	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/internal/bench/workload"
	"github.com/gpuscale/gpuscale/internal/harness/devenv"
)

type disaggFlags struct {
	start, duration, slo, itl time.Duration
	speedup                   float64
	out                       string
}

// runDisagg replays the disaggregated workload through the control plane
// and prints its table beside the offline replay's of the same requests.
func runDisagg(f disaggFlags, log *slog.Logger) error {
	w := workload.Disaggregated()
	reqs := w.Generate(robustness.Seed)
	d := f.duration
	if d == 0 {
		d = reqs[len(reqs)-1].At + time.Nanosecond
	}
	reqs = (&trace.Trace{Requests: reqs}).Slice(f.start, d)
	if len(reqs) == 0 {
		return fmt.Errorf("no requests in [%v, %v) of the disaggregated workload", f.start, f.start+d)
	}
	bench := offlinereplay.NewDisaggBench(reqs, f.slo, f.itl)
	static, offline, err := bench.Run()
	if err != nil {
		return fmt.Errorf("offline replay: %w", err)
	}
	cfg := bench.Live(w.Name, static, f.speedup)
	cfg.Log = log
	plan, err := autoscalebench.NewDisaggPlan(cfg)
	if err != nil {
		return err
	}
	fmt.Printf("replaying %d requests (%v of %s from %v) at %vx: about %v of wall time\nstatic pools %d prefill, %d decode; autoscaled pools start at %v, HPAs up to %v\n",
		len(reqs), plan.Duration.Round(time.Second), w.Name, f.start, f.speedup, time.Duration(float64(plan.Duration)/f.speedup).Round(time.Second),
		static[0], static[1], cfg.Initial, cfg.MaxReplicas)

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	envDir := filepath.Join(f.out, "env")
	if err := os.MkdirAll(envDir, 0o755); err != nil {
		return err
	}
	clock := autoscalebench.NewClock(f.speedup)
	began := time.Now()
	env, err := devenv.Up(ctx, plan.EnvOptions(envDir, clock, log))
	if err != nil {
		return fmt.Errorf("environment (logs in %s): %w", envDir, err)
	}
	defer func() {
		if err := env.Down(); err != nil {
			log.Warn("teardown", "err", err)
		}
	}()
	rec, stats, err := autoscalebench.RunDisagg(ctx, env, plan, clock)
	if err != nil {
		return err
	}
	if err := autoscalebench.WriteDisaggReport(f.out, *rec); err != nil {
		return err
	}
	fmt.Printf("\ncontrol plane (real HPA controller and adapter):\n\n%s\noffline replay of the same requests:\n\n%s\n",
		autoscalebench.DisaggTable(*rec, autoscalebench.SummarizeDisagg(*rec)), offlinereplay.DisaggTable(static, offline))
	fmt.Printf("dispatch lag p99 %v, max %v; requests with no ready replica: %d\nreport in %s (wall %v)\n",
		stats.DispatchLagP99.Round(time.Millisecond), stats.DispatchLagMax.Round(time.Millisecond), stats.NoBackend, f.out, time.Since(began).Round(time.Second))
	return nil
}
