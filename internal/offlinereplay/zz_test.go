package offlinereplay

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/internal/autoscalebench"
	"github.com/gpuscale/gpuscale/internal/workload"
	"github.com/gpuscale/gpuscale/pkg/capacity"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

func TestZZDisagg(t *testing.T) {
	for _, slo := range []time.Duration{2 * time.Second} {
	reqs := workload.Disaggregated().Generate(2026)
	base := DisaggConfig{Requests: reqs, Profile: inferencesim.L4Profile(), SLO: time.Second, ITLSLO: 150 * time.Millisecond,
		ModelLoad: time.Minute, StartDelay: 3 * time.Second, Grace: 30 * time.Second, Transfer: DefaultKVTransfer(),
		Scrape: 5 * time.Second, Sync: 15 * time.Second, SyncPhase: 7 * time.Second}
	t0 := time.Now()
	base.SLO = slo
	sizes := [2]int{6, 8}; c0 := base; c0.Initial = sizes; st, err := RunDisagg(c0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("static %v: met %d/%d (ttft %d itl %d), GPUh %.2f, unserved %d rejected %d (%v)\n", sizes, st.MinutesMet, len(st.MetMinute), st.TTFTMet, st.ITLMet, st.ReplicaSeconds/3600, st.Unserved, st.Rejected, time.Since(t0))
	for _, obj := range []time.Duration{slo} {
	for _, name := range []string{DisaggPerRole} {
		cfg := capacity.DefaultConfig()
		cfg.Objective = obj
		fmt.Println("objective", obj)
		cfg.ITLObjective = base.ITLSLO
		last := map[string]int{}
		parts := func(now time.Time, pool string, e capacity.Estimate) {
			m := int(now.Sub(origin) / time.Minute)
			if last[pool] == m+1 || m < 10 || m > 20 {
				return
			}
			last[pool] = m + 1 - 1 + 1; _ = 0
			fmt.Printf("  m%2d %-7s ready %2d demand %5.1f fc %5.1f | KV %4.1f (slots %4.1f) | PF %4.1f (busy %4.2f max %.2f reach %v) | ITL %4.1f (q %.3f slots %.1f fit %v)\n", m, pool, e.Replicas, e.Demand, e.Forecast, e.KVNeeded, e.Slots, e.PrefillNeeded, e.PrefillBusy, e.Prefill.MaxBusy, e.Prefill.Reachable, e.ITLNeeded, e.ITL.Quantile, e.ITL.Slots, e.ITL.Fitted)
		}
		pol, b, err := NewDisaggPolicy(name, DisaggOptions{Capacity: cfg, Startup: time.Minute, MaxReplicas: [2]int{2 * sizes[0], 2 * sizes[1]}, Parts: parts})
		if err != nil {
			t.Fatal(err)
		}
		c := base
		c.Policy, c.Behavior, c.Initial = pol, b, [2]int{2, 3}
		r, err := RunDisagg(c)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("%-12s met %d/%d (ttft %d itl %d), GPUh %.2f (%.0f%%; P %.2f D %.2f), peaks %v, ups %d downs %d, unserved %d\n", name, r.MinutesMet, len(r.MetMinute), r.TTFTMet, r.ITLMet,
			r.ReplicaSeconds/3600, 100*r.ReplicaSeconds/st.ReplicaSeconds, r.PoolSeconds[0]/3600, r.PoolSeconds[1]/3600, r.PoolPeak, r.Ups, r.Downs, r.Unserved)
		var lost []string
		for m, ok := range r.MetMinute {
			if !ok && st.MetMinute[m] {
				lost = append(lost, fmt.Sprintf("%d(%.2fs,pf %.2fs,%.0fms)", m, r.P90[m], r.PrefillP90[m], 1000*r.ITLP90[m]))
			}
		}
		fmt.Println("   lost:", lost)
		printPools(r)
	}
	}
	}
}

func TestZZUnified(t *testing.T) {
	reqs := workload.Disaggregated().Generate(2026)
	cfg := Config{Requests: reqs, Profile: inferencesim.L4Profile(), SLO: time.Second, ModelLoad: time.Minute, StartDelay: 3 * time.Second,
		Grace: 30 * time.Second, Scrape: 5 * time.Second, Sync: 15 * time.Second, SyncPhase: 7 * time.Second}
	best, bestN := -1, 0
	var st Result
	for n := 1; n <= 30; n++ {
		c := cfg
		c.Initial = n
		r, _ := Run(c)
		if r.MinutesMet > best {
			best, bestN, st = r.MinutesMet, n, r
		}
		if r.MinutesMet == len(r.MetMinute) {
			break
		}
	}
	fmt.Printf("unified static %d: met %d/%d GPUh %.2f\n", bestN, st.MinutesMet, len(st.MetMinute), st.ReplicaSeconds/3600)
	pol, b, _ := NewPolicy(PolicyRecommended, PolicyOptions{Targets: autoscalebench.Targets{TTFT: time.Second, ModelLoad: 63 * time.Second}, MaxReplicas: 2 * bestN})
	c := cfg
	c.Policy, c.Behavior, c.Initial = pol, b, 4
	r, _ := Run(c)
	fmt.Printf("unified recommended: met %d/%d GPUh %.2f (%.0f%%) peak %d\n", r.MinutesMet, len(r.MetMinute), r.ReplicaSeconds/3600, 100*r.ReplicaSeconds/st.ReplicaSeconds, r.Peak)
}

func printPools(r DisaggResult) {
	for pl := range 2 {
		fmt.Printf("  %-7s", Pool(pl))
		for i, d := range r.PoolDesired[pl] {
			if i%8 == 0 {
				fmt.Printf("%d ", d)
			}
		}
		fmt.Println()
	}
}
