// Command bench-autoscale replays a recorded LLM trace through a local
// control plane under several autoscaling policies at once and writes a
// report with plots (make bench-autoscale; docs/autoscaling.md).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/autoscalebench"
	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/internal/harness/devenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-autoscale:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		tracePath = flag.String("trace", "test/traces/azure-llm-inference-2023-conv.csv", "Trace to replay: CSV with TIMESTAMP, ContextTokens and GeneratedTokens columns.")
		start     = flag.Duration("start", 0, "Offset of the replayed slice from the trace's first request.")
		duration  = flag.Duration("duration", 0, "Length of the replayed slice (0: to the end of the trace).")
		speedup   = flag.Float64("speedup", 6, "How many times faster than real time the trace plays; every controller timer is divided by it too.")
		slo       = flag.Duration("slo", time.Second, "TTFT p90 a trace minute must stay within; also the TTFT policy's target.")
		modelLoad = flag.Duration("model-load", time.Minute, "Trace time a new replica takes to become Ready.")
		profile   = flag.String("profile", "l4-llama-3.1-8b", "Replica performance profile (pkg/inferencesim).")
		policies  = flag.String("policies", strings.Join(autoscalebench.Policies, ","), "Comma-separated policies to compare; recommended is the README's first example ("+autoscalebench.Recommended+"). "+
			"A policy followed by "+autoscalebench.AbortSuffix+" runs again on replicas without the drain (vLLM aborts what a removed replica holds).")
		gpuTarget = flag.Float64("gpu-target", 70, "averageValue of the gpu-utilization policy.")
		queue     = flag.Float64("queue-target", 1, "averageValue of the queue-depth policies.")
		running   = flag.Float64("running-target", 16, "averageValue of the running-requests policy.")
		maxR      = flag.Int("max-replicas", 0, "maxReplicas of every HPA (0: the static policy's size, the fleet the README advises as maxReplicas).")
		out       = flag.String("out", "_output/bench-autoscale", "Directory for the report, plots and logs.")
		from      = flag.String("report-from", "", "Write the report and plots of an earlier run's recording.json into --out, without replaying.")
		disagg    = flag.Bool("disaggregated", false, "Replay the disaggregated workload (a prefill and a decode pool per policy: static, single-pool, per-role) instead of a trace, "+
			"beside the offline replay of the same requests; --slo (default 2s here) and --itl-slo judge it, --start and --duration slice it, --out defaults to _output/bench-autoscale-disaggregated.")
		drain  = flag.String("drain", string(autoscalebench.DrainWait), "How a removed replica drains, as adapter recommend prints it: wait (vLLM 0.18 or later: a preStop sleep over the endpoint lag, then --shutdown-timeout, exiting once idle) or sleep (a preStop sleep over the longest stream, for a server that aborts at SIGTERM).")
		itlSLO = flag.Duration("itl-slo", 150*time.Millisecond, "With --disaggregated: the ITL p90 a minute must stay within.")
	)
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if *from != "" {
		return rereport(*from, *out)
	}
	if *disagg {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		o := disaggFlags{start: *start, duration: *duration, speedup: *speedup, slo: 2 * time.Second, itl: *itlSLO, out: "_output/bench-autoscale-disaggregated"}
		if set["slo"] {
			o.slo = *slo
		}
		if set["out"] {
			o.out = *out
		}
		return runDisagg(o, log)
	}

	tr, err := trace.ReadFile(*tracePath)
	if err != nil {
		return err
	}
	cfg := autoscalebench.DefaultConfig(*tracePath, tr)
	cfg.Start, cfg.Speedup, cfg.SLO, cfg.ModelLoad, cfg.Profile = *start, *speedup, *slo, *modelLoad, *profile
	cfg.DrainMode = autoscalebench.DrainMode(*drain)
	if *duration > 0 {
		cfg.Duration = *duration // the plan ends it with the trace
	}
	cfg.Policies = strings.Split(*policies, ",")
	for i, p := range cfg.Policies {
		cfg.Policies[i] = autoscalebench.Resolve(p) // "recommended": the README's first example
	}
	cfg.Targets.GPUUtilization, cfg.Targets.QueueDepth, cfg.Targets.RequestsRunning, cfg.Targets.TTFT = *gpuTarget, *queue, *running, *slo
	cfg.MaxReplicas = *maxR
	cfg.Log = log
	plan, err := autoscalebench.NewPlan(cfg)
	if err != nil {
		return err
	}
	return replayPlan(plan, *out, log)
}

// replayPlan starts the local control plane on the plan's compressed
// clock, replays the plan's requests under every policy at once, and
// writes the report, the plots and the recording into out.
func replayPlan(plan *autoscalebench.Plan, out string, log *slog.Logger) error {
	fmt.Printf("replaying %d requests (%v of trace from %v) at %vx: about %v of wall time\n",
		len(plan.Requests), plan.Duration.Round(time.Second), plan.Start, plan.Speedup, time.Duration(float64(plan.Duration)/plan.Speedup).Round(time.Second))
	fmt.Printf("static peak need %d replicas (meets the SLO in %d of %d minutes; no count does better); start at %d; HPAs 1-%d\n",
		plan.Static, plan.StaticMet, plan.Minutes, plan.Initial, plan.MaxReplicas)

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	envDir := filepath.Join(out, "env")
	if err := os.MkdirAll(envDir, 0o755); err != nil {
		return err
	}
	clock := autoscalebench.NewClock(plan.Speedup)
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
	fmt.Printf("environment up in %v\n", time.Since(began).Round(time.Second))
	rec, stats, err := autoscalebench.Run(ctx, env, plan, clock)
	if err != nil {
		return err
	}
	report, err := writeRecording(out, rec)
	if err != nil {
		return err
	}
	fmt.Printf("%s\ndispatch lag p99 %v, max %v; requests with no ready replica: %d\nreport and plots in %s (wall %v)\n",
		report, stats.DispatchLagP99.Round(time.Millisecond), stats.DispatchLagMax.Round(time.Millisecond), stats.NoBackend, out, time.Since(began).Round(time.Second))
	return nil
}

// writeRecording writes the report, the plots and recording.json of rec
// into out, and returns report.md.
func writeRecording(out string, rec *autoscalebench.Recording) ([]byte, error) {
	if err := autoscalebench.WriteReport(out, *rec); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(out, "recording.json"), raw, 0o644); err != nil {
		return nil, err
	}
	return os.ReadFile(filepath.Join(out, "report.md"))
}

// rereport renders the report and plots of a saved recording.
func rereport(path, out string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var rec autoscalebench.Recording
	if err := json.Unmarshal(raw, &rec); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := autoscalebench.WriteReport(out, rec); err != nil {
		return err
	}
	fmt.Printf("report and plots of %s in %s\n", path, out)
	return nil
}
