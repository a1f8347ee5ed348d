// Command offline-replay replays a trace under an emulated HPA in virtual
// time (internal/offlinereplay): an hour in seconds, to design autoscaling
// signals and sweep their choices. What a policy achieves is measured by
// make bench-autoscale, with the real HPA controller and adapter; this tool
// reproduces its figures to within a minute or two (docs/autoscaling.md).
//
//	go run ./hack/offline-replay                                  # the conversation hour
//	go run ./hack/offline-replay --trace=test/traces/synthetic-burst.csv
//	go run ./hack/offline-replay --policies=static,schedule --schedule=37s:9 --duration=5m
//	go run ./hack/offline-replay --per-minute-need
//	go run ./hack/offline-replay --policies=static,running-requests --running-requests-target=17
//	go run ./hack/offline-replay --policies=static,capacity --capacity-scale-down-window=5m
package main

import (
	"flag"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/gpuscale/gpuscale/internal/autoscalebench"
	"github.com/gpuscale/gpuscale/internal/offlinereplay"
	"github.com/gpuscale/gpuscale/internal/trace"
	"github.com/gpuscale/gpuscale/pkg/capacity"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

func main() {
	var (
		tracePath = flag.String("trace", "test/traces/azure-llm-inference-2023-conv.csv", "Trace to replay.")
		policies  = flag.String("policies", "static,running-requests,capacity", "Policies, comma-separated: static, running-requests, capacity, schedule.")
		phase     = flag.Duration("sync-phase", 7*time.Second, "Time of the first HPA sync (the bench's is wherever the controller's timer falls).")
		start     = flag.Duration("start", 0, "Start of the slice to replay.")
		duration  = flag.Duration("duration", 0, "Length of the slice (0: to the end).")
		schedule  = flag.String("schedule", "37s:9", "For the schedule policy: at DURATION ask for N replicas, as DURATION:N.")
		objective = flag.Duration("capacity-ttft-objective", time.Second, "The capacity policy's TTFT objective.")
		window    = flag.Duration("capacity-window", time.Minute, "The capacity policy's prefill-time window (the adapter's --ttft-window).")
		need      = flag.Bool("per-minute-need", false, "Print each minute's arrivals and the fewest static replicas that meet it, and exit.")
		parts     = flag.Bool("capacity-parts", false, "Print the capacity estimate's parts at each minute's first sync.")
		target    = flag.Float64("running-requests-target", 16, "The running-requests policy's averageValue.")
		down      = flag.Duration("capacity-scale-down-window", 0, "The capacity policy's scale-down stabilization window (0: what `adapter recommend` gives).")
	)
	flag.Parse()
	t, err := trace.ReadFile(*tracePath)
	if err != nil {
		log.Fatal(err)
	}
	d := *duration
	if d == 0 {
		d = t.Duration() + time.Nanosecond
	}
	reqs := t.Slice(*start, d)
	prof := inferencesim.L4Profile()
	if *need {
		printNeed(reqs, prof)
		return
	}
	static, staticMet, minutes, err := autoscalebench.StaticNeed(reqs, prof, time.Second, 64)
	if err != nil {
		log.Fatal(err)
	}
	initial, _, _, err := autoscalebench.StaticNeed(t.Slice(*start, min(time.Minute, d)), prof, time.Second, 64)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("static %d replicas meet %d of %d minutes; every policy starts at %d\n", static, staticMet, minutes, initial)
	var base offlinereplay.Result
	for _, name := range strings.Split(*policies, ",") {
		cfg := offlinereplay.Config{
			Requests: reqs, Profile: prof, SLO: time.Second, ModelLoad: time.Minute, StartDelay: 3 * time.Second,
			Grace: 30 * time.Second, Initial: initial, Scrape: 5 * time.Second, Sync: 15 * time.Second, SyncPhase: *phase,
		}
		cfg.Policy, cfg.Behavior, err = policy(name, policyOptions{
			schedule: *schedule, runningTarget: *target, objective: *objective, window: *window, downWindow: *down,
			maxReplicas: 2 * static, parts: partsPrinter(*parts),
		})
		if err != nil {
			log.Fatal(err)
		}
		if name == "static" {
			cfg.Initial = static
		}
		res, err := offlinereplay.Run(cfg)
		if err != nil {
			log.Fatal(err)
		}
		if name == "static" {
			base = res
		}
		report(name, res, base)
	}
}

// partsPrinter prints the first estimate of each minute, if on.
func partsPrinter(on bool) func(time.Time, capacity.Estimate) {
	if !on {
		return nil
	}
	last := -1
	return func(now time.Time, e capacity.Estimate) {
		m := int(now.Sub(time.Unix(0, 0)) / time.Minute)
		if m == last {
			return
		}
		last = m
		fmt.Printf("  minute %2d: ready %2d demand %5.1f forecast %5.1f | KV term %4.1f (per replica %4.1f) | prefill term %4.1f (busy %4.2f, max busy %.3f, over objective %.3f, reachable %v)\n",
			m, e.Replicas, e.Demand, e.Forecast, e.KVNeeded, e.PerReplica, e.PrefillNeeded, e.PrefillBusy, e.Prefill.MaxBusy, e.Prefill.OverObjective, e.Prefill.Reachable)
	}
}

func report(name string, res, static offlinereplay.Result) {
	var lost []string
	for m, ok := range res.MetMinute {
		if !ok && m < len(static.MetMinute) && static.MetMinute[m] {
			lost = append(lost, fmt.Sprintf("%d (%.2fs)", m, res.P90[m]))
		}
	}
	cost := "-"
	if static.ReplicaSeconds > 0 {
		cost = fmt.Sprintf("%.1f%%", 100*res.ReplicaSeconds/static.ReplicaSeconds)
	}
	fmt.Printf("%-17s SLO minutes %2d/%d  of static %6s  ups/downs %2d/%2d  peak %2d  unserved %d\n",
		name, res.MinutesMet, len(res.MetMinute), cost, res.Ups, res.Downs, res.Peak, res.Unserved)
	if len(lost) > 0 {
		fmt.Printf("%17s minutes static meets, lost: %s\n", "", strings.Join(lost, ", "))
	}
}

// printNeed prints, per minute, the arrivals and the fewest replicas that,
// serving the whole trace from the start, meet that minute's SLO.
func printNeed(reqs []trace.Request, prof inferencesim.Profile) {
	last := int(reqs[len(reqs)-1].At / time.Minute)
	need := make([]int, last+1)
	arrivals := make([]int, last+1)
	for _, r := range reqs {
		arrivals[int(r.At/time.Minute)]++
	}
	for n := 1; n <= 16; n++ {
		res, err := offlinereplay.Run(offlinereplay.Config{Requests: reqs, Profile: prof, SLO: time.Second, Initial: n,
			Scrape: 5 * time.Second, Sync: 15 * time.Second, Grace: 30 * time.Second})
		if err != nil {
			log.Fatal(err)
		}
		for m, ok := range res.MetMinute {
			if ok && need[m] == 0 {
				need[m] = n
			}
		}
	}
	for m := range need {
		n := fmt.Sprint(need[m])
		if need[m] == 0 {
			n = "none of 1-16"
		}
		fmt.Printf("minute %2d: %3d requests, need %s\n", m, arrivals[m], n)
	}
}
