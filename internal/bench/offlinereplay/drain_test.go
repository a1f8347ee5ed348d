package offlinereplay_test

import (
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/autoscalebench"
	"github.com/gpuscale/gpuscale/internal/bench/offlinereplay"
	"github.com/gpuscale/gpuscale/internal/bench/robustness"
	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

// TestScaleDownCutsNoStream replays slices of the bench's traces, under
// the bench's plan (its HPA targets, start-up time and the drain `adapter
// recommend` derives from the slice's stream lengths), on which a policy
// scales down. With today's template (no preStop: vLLM aborts at SIGTERM)
// and the ReplicaSet's own victims (the newest), scale-downs cut streams;
// with the load-aware victims (scaledown.LoadRank) and the recommended
// drain, no scale-down cuts a stream or drops a queued request. The
// figures are docs/scale-down.md's table; the slices are ones on which the
// README's HPA (target 0.8, maxReplicas the static fleet) scales down.
func TestScaleDownCutsNoStream(t *testing.T) {
	tests := []struct {
		trace           string
		start, duration time.Duration // 0 duration: to the end
		policy          string
	}{
		{"azure-llm-inference-2023-conv.csv", 18 * time.Minute, 7 * time.Minute, autoscalebench.Recommended},
		{"synthetic-burst.csv", 13 * time.Minute, 5 * time.Minute, autoscalebench.Recommended},
		{"synthetic-code-completion.csv", 0, 0, autoscalebench.PolicyQueueDepth},
	}
	variants := []struct {
		name    string
		victims offlinereplay.Victims
		drain   bool
	}{
		{"today", offlinereplay.VictimsNewest, false},
		{"load-aware victims", offlinereplay.VictimsIdlest, false},
		{"drain", offlinereplay.VictimsNewest, true},
		{"load-aware victims + drain", offlinereplay.VictimsIdlest, true},
	}
	setup := robustness.DefaultSetup()
	for _, tt := range tests {
		t.Run(tt.trace+"/"+tt.policy, func(t *testing.T) {
			tr, err := trace.ReadFile("../../../test/traces/" + tt.trace)
			if err != nil {
				t.Fatal(err)
			}
			cfg := autoscalebench.DefaultConfig(tt.trace, tr)
			if tt.duration > 0 {
				cfg.Start, cfg.Duration = tt.start, tt.duration
			}
			plan, err := autoscalebench.NewPlan(cfg)
			if err != nil {
				t.Fatal(err)
			}
			prof, err := inferencesim.ProfileByName(plan.Profile)
			if err != nil {
				t.Fatal(err)
			}
			res := map[string]offlinereplay.Result{}
			for _, v := range variants {
				p, b, err := offlinereplay.NewPolicy(tt.policy, offlinereplay.PolicyOptions{MaxReplicas: plan.MaxReplicas, Targets: plan.Targets})
				if err != nil {
					t.Fatal(err)
				}
				term := &offlinereplay.Termination{}
				if v.drain {
					term.PreStop = plan.Drain.PreStop
				}
				r, err := offlinereplay.Run(offlinereplay.Config{Requests: plan.Requests, Profile: prof, SLO: cfg.SLO, ModelLoad: cfg.ModelLoad, StartDelay: setup.StartDelay,
					Initial: plan.Initial, Scrape: setup.Scrape, Sync: setup.Sync, SyncPhase: setup.Phase, Behavior: b, Policy: p,
					Terminate: term, Victims: v.victims})
				if err != nil {
					t.Fatal(err)
				}
				if len(r.DownStreams) != r.Downs {
					t.Fatalf("%s: %d scale-downs, %d counts of streams cut", v.name, r.Downs, len(r.DownStreams))
				}
				res[v.name] = r
				t.Logf("FIGURE scale-down streams %s %v+%v %s, %s (preStop %v): %d scale-downs, streams cut %d %v, requests aborted %d, GPU-hours %.3f",
					tt.trace, tt.start, cfg.Duration, tt.policy, v.name, term.PreStop, r.Downs, r.AbortedStreams, r.DownStreams, r.Aborted, r.ReplicaSeconds/3600)
			}
			today, now := res["today"], res["load-aware victims + drain"]
			if today.Downs == 0 || today.AbortedStreams == 0 {
				t.Fatalf("today's scale-downs: %d, cutting %d streams; the slice must show streams cut to compare against", today.Downs, today.AbortedStreams)
			}
			if now.Downs == 0 {
				t.Fatal("no scale-down with the drain: nothing measured")
			}
			for i, n := range now.DownStreams {
				if n != 0 {
					t.Errorf("scale-down %d of %d cut %d streams with load-aware victims and the recommended drain (%v); want none", i+1, now.Downs, n, plan.Drain.PreStop)
				}
			}
			if now.Aborted != 0 {
				t.Errorf("%d requests aborted with the drain; want none", now.Aborted)
			}
			if idle := res["load-aware victims"]; idle.AbortedStreams > today.AbortedStreams {
				t.Errorf("load-aware victims cut %d streams, more than today's %d", idle.AbortedStreams, today.AbortedStreams)
			}
		})
	}
}
