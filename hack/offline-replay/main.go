// Command offline-replay replays traces under emulated autoscaling policies
// in virtual time (internal/bench/offlinereplay): an hour in seconds, to design
// autoscaling signals, sweep their choices and check them on a family of
// traffic shapes (internal/bench/robustness). What a policy achieves on a real
// cluster is measured by make bench-autoscale, with the real HPA
// controller and adapter; this tool reproduces its figures to within a
// minute or two (docs/autoscaling.md).
//
//	go run ./hack/offline-replay                                  # every policy on the conversation hour
//	go run ./hack/offline-replay --trace=test/traces/synthetic-burst.csv --json
//	go run ./hack/offline-replay --workload=lulls                 # a shape of the family, at its SLO
//	go run ./hack/offline-replay --family --update-docs=docs/autoscaling.md
//	go run ./hack/offline-replay --policies=static,schedule --schedule=37s:9 --duration=5m
//	go run ./hack/offline-replay --per-minute-need
//	go run ./hack/offline-replay --policies=static,running-requests --running-requests-target=17
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/autoscalebench"
	"github.com/gpuscale/gpuscale/internal/bench/offlinereplay"
	"github.com/gpuscale/gpuscale/internal/bench/robustness"
	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/internal/bench/workload"
	"github.com/gpuscale/gpuscale/pkg/signal/capacity"
	"github.com/gpuscale/gpuscale/pkg/signal/recommend"
)

type flags struct {
	tracePath, shape, policies, schedule, updateDocs  string
	goalPolicy, needReading                           string
	family, asJSON, need, parts, disagg, counts       bool
	sequentialNeed, reactivePeriodic                  bool
	spreadKV, measuredArrivals, settledSpread         bool
	minCorrection, maxCorrection, maxOfStatic         float64
	itl                                               time.Duration
	phase, start, duration, slo                       time.Duration
	objective, window, down, downPeriod, reactiveHold time.Duration
	downPercent, downPods                             int
	seed                                              uint64
	runningTarget, reactiveMargin, capacityTarget     float64
	reactiveLookback                                  int
	reactiveQuantile                                  float64
}

func main() {
	var f flags
	flag.StringVar(&f.tracePath, "trace", "test/traces/azure-llm-inference-2023-conv.csv", "Trace to replay.")
	flag.StringVar(&f.shape, "workload", "", "Replay a shape of the workload family instead of --trace (go run ./hack/gen-trace -list).")
	flag.BoolVar(&f.family, "family", false, "Replay every shape of the family and the three recorded workloads, and print the robustness table.")
	flag.StringVar(&f.updateDocs, "update-docs", "", "With --family: write the table between the robustness markers of this Markdown file.")
	flag.StringVar(&f.policies, "policies", strings.Join(offlinereplay.AllPolicies(), ","), "Policies, comma-separated: "+strings.Join(offlinereplay.AllPolicies(), ", ")+", schedule.")
	flag.BoolVar(&f.asJSON, "json", false, "Print one JSON object per policy, with the fields of the bench's report.json.")
	flag.DurationVar(&f.slo, "slo", 0, "TTFT p90 SLO: static sizing, the report and the default objective (0: 1s for a trace, the ladder rule for a shape).")
	flag.DurationVar(&f.phase, "sync-phase", 7*time.Second, "Time of the first HPA sync (the bench's is wherever the controller's timer falls).")
	flag.DurationVar(&f.start, "start", 0, "Start of the slice to replay.")
	flag.DurationVar(&f.duration, "duration", 0, "Length of the slice (0: to the end).")
	flag.StringVar(&f.schedule, "schedule", "37s:9", "For the schedule policy: from DURATION on ask for N replicas, as DURATION:N, several comma-separated (it never scales down).")
	flag.DurationVar(&f.objective, "capacity-ttft-objective", 0, "The capacity policy's TTFT objective (0: the SLO).")
	flag.DurationVar(&f.window, "capacity-window", time.Minute, "The capacity policy's prefill-time window (the adapter's --ttft-window).")
	flag.BoolVar(&f.need, "per-minute-need", false, "Print each minute's arrivals and the fewest static replicas that meet it, and exit.")
	flag.StringVar(&f.needReading, "need", robustness.ReadingBest, "How the clairvoyant and reactive references (and --per-minute-need) read each minute's need: whole-trace (offlinereplay.MinuteNeed: the fewest static replicas that meet it serving the whole trace, which carries a burst's backlog into the minutes after it), sequential (offlinereplay.SequentialNeed: given the needs chosen for the minutes before it; several times slower), or best (both, each reference's better run kept).")
	flag.BoolVar(&f.sequentialNeed, "sequential-need", false, "Shorthand for --need=sequential.")
	flag.BoolVar(&f.parts, "capacity-parts", false, "Print the capacity estimate's parts at each minute's first sync (with --disaggregated: each policy's and pool's).")
	flag.Float64Var(&f.runningTarget, "running-requests-target", 16, "The running-requests policy's averageValue.")
	flag.DurationVar(&f.down, "capacity-scale-down-window", 0, "The capacity policy's scale-down stabilization window (0: what `adapter recommend` gives).")
	flag.IntVar(&f.downPercent, "capacity-scale-down-percent", 0, "Add to the capacity policy's scale-down policies `adapter recommend` gives one of this percent per their period (0: none).")
	flag.IntVar(&f.downPods, "capacity-scale-down-pods", 0, "The replicas of every Pods scale-down policy of the capacity policy (0: what `adapter recommend` gives).")
	flag.DurationVar(&f.downPeriod, "capacity-scale-down-period", 0, "The period of every scale-down policy of the capacity policy (0: what `adapter recommend` gives).")
	flag.BoolVar(&f.disagg, "disaggregated", false, "Replay the disaggregated workload (a prefill and a decode pool) under static provisioning, the single-pool and the per-role capacity policies, and print the table of docs/autoscaling.md; --slo (0: 2s) and --itl-slo judge it.")
	flag.DurationVar(&f.itl, "itl-slo", 150*time.Millisecond, "With --disaggregated: the ITL p90 objective.")
	flag.Float64Var(&f.maxOfStatic, "max-of-static", 1, "Every autoscaled policy's maxReplicas as a multiple of static provisioning's replicas, rounded up (1, the README's: the fleet static would provision).")
	flag.BoolVar(&f.counts, "goal-counts", false, "With --family: print only the row of goal counts of --goal-policy (workloads missing each goal, scale events), as hack/robustness-sweep.sh records it, and on stderr each workload's outcome and the goals it misses.")
	flag.StringVar(&f.goalPolicy, "goal-policy", offlinereplay.PolicyRecommended, "With --goal-counts: the policy judged against the goals (one of --policies).")
	flag.BoolVar(&f.spreadKV, "capacity-spread-kv", false, "The capacity policy's KV term on the measured spread of KV in use (capacity.Config.SpreadKV).")
	flag.BoolVar(&f.measuredArrivals, "capacity-measured-arrivals", false, "The capacity policy's prefill term credits a router more even than random (capacity.Config.MeasuredArrivals).")
	flag.BoolVar(&f.settledSpread, "capacity-settled-spread", false, "The capacity policy's measured spreads leave out replicas Ready for less than a window (capacity.Config.SettledSpread).")
	flag.Float64Var(&f.minCorrection, "capacity-min-correction", 0, "The closed loop's lower bound (0: the default's).")
	flag.Float64Var(&f.maxCorrection, "capacity-max-correction", 0, "The closed loop's upper bound (0: the default's).")
	flag.DurationVar(&f.reactiveHold, "reactive-hold", 0, "The reactive reference's scale-down window (0: one start-up, as `adapter recommend` gives).")
	flag.Float64Var(&f.reactiveMargin, "reactive-margin", 0, "The share the reactive reference asks for above each minute's need.")
	flag.IntVar(&f.reactiveLookback, "reactive-lookback", 0, "The reactive reference asks for --reactive-quantile of the needs of the current minute and this many before it (0: the current minute's).")
	flag.Float64Var(&f.reactiveQuantile, "reactive-quantile", 1, "With --reactive-lookback: the quantile of the needs seen, in (0, 1].")
	flag.BoolVar(&f.reactivePeriodic, "reactive-periodic", false, "The reactive reference also asks, a start-up ahead, for the needs one period before the minutes coming, once the needs it has seen repeat with a period (a seasonal-naive prediction that errs less than the minute before's).")
	flag.Float64Var(&f.capacityTarget, "capacity-target", recommend.CapacityTarget, "The capacity policy's HPA target value (the README's).")
	flag.Uint64Var(&f.seed, "seed", robustness.Seed, "The seed the family's shapes, and with --disaggregated its workload, are drawn with (another one: traffic no default was chosen on).")
	flag.Parse()
	if err := run(f); err != nil {
		log.Fatal(err)
	}
}

func run(f flags) error {
	if !(f.maxOfStatic > 0) {
		return fmt.Errorf("--max-of-static=%v: want a multiple above 0", f.maxOfStatic)
	}
	if !(f.capacityTarget > 0) {
		return fmt.Errorf("--capacity-target=%v: want a value above 0", f.capacityTarget)
	}
	if f.reactiveLookback < 0 || !(f.reactiveQuantile > 0 && f.reactiveQuantile <= 1) {
		return fmt.Errorf("--reactive-lookback=%d --reactive-quantile=%v: want minutes of 0 or more and a quantile in (0, 1]", f.reactiveLookback, f.reactiveQuantile)
	}
	if !(f.reactiveMargin >= 0) {
		return fmt.Errorf("--reactive-margin=%v: want a share of 0 or more", f.reactiveMargin)
	}
	setup := robustness.DefaultSetup()
	setup.MaxOfStatic = f.maxOfStatic
	if f.sequentialNeed {
		f.needReading = robustness.ReadingSequential
	}
	reading, err := robustness.ParseNeedReading(f.needReading)
	if err != nil {
		return fmt.Errorf("--need: %w", err)
	}
	setup.Need = reading
	setup.Tweak = func(o *offlinereplay.PolicyOptions) {
		o.Schedule, o.Objective, o.Window, o.DownWindow = f.schedule, f.objective, f.window, f.down
		o.DownPercent, o.DownPods, o.DownPeriod = f.downPercent, f.downPods, f.downPeriod
		o.ReactiveHold, o.ReactiveMargin = f.reactiveHold, f.reactiveMargin
		o.ReactiveLookback, o.ReactiveQuantile, o.ReactivePeriodic = f.reactiveLookback, f.reactiveQuantile, f.reactivePeriodic
		o.CapacityTarget = f.capacityTarget
		o.Targets.RequestsRunning = f.runningTarget
		o.Parts = partsPrinter(f.parts, "")
		o.Capacity = func(c *capacity.Config) {
			c.SpreadKV = c.SpreadKV || f.spreadKV
			c.MeasuredArrivals = c.MeasuredArrivals || f.measuredArrivals
			c.SettledSpread = c.SettledSpread || f.settledSpread
			if f.minCorrection > 0 {
				c.MinCorrection = f.minCorrection
			}
			if f.maxCorrection > 0 {
				c.MaxCorrection = f.maxCorrection
			}
		}
	}
	setup.Phase = f.phase
	policies := strings.Split(f.policies, ",")
	if f.disagg {
		return runDisagg(f)
	}
	if f.family {
		return runFamily(f, setup, policies)
	}
	w, err := single(f)
	if err != nil {
		return err
	}
	if f.need {
		return printNeed(w, setup)
	}
	reports, err := robustness.Run([]robustness.Workload{w}, policies, setup)
	if err != nil {
		return err
	}
	r := reports[0]
	if f.asJSON {
		return printJSON(r)
	}
	fmt.Printf("%s at a %v SLO: static %d replicas meet %d of %d minutes\n", w.Name, r.SLO, r.Static, r.Reachable, minutes(r))
	for _, o := range r.Outcomes {
		report(o, r)
	}
	return nil
}

// single is the one workload --trace or --workload names, sliced.
func single(f flags) (robustness.Workload, error) {
	if f.shape != "" {
		for _, s := range workload.Family() {
			if s.Name == f.shape {
				return robustness.Workload{Name: s.Name, About: s.About, Bursty: s.Bursty,
					Requests: slice(s.Generate(f.seed), f.start, f.duration), SLO: f.slo}, nil
			}
		}
		return robustness.Workload{}, fmt.Errorf("no shape %q in the family", f.shape)
	}
	t, err := trace.ReadFile(f.tracePath)
	if err != nil {
		return robustness.Workload{}, err
	}
	slo := f.slo
	if slo == 0 {
		slo = time.Second
	}
	return robustness.Workload{Name: f.tracePath, Requests: slice(t.Requests, f.start, f.duration), SLO: slo}, nil
}

func slice(reqs []trace.Request, start, d time.Duration) []trace.Request {
	if d == 0 {
		d = reqs[len(reqs)-1].At + time.Nanosecond
	}
	t := trace.Trace{Requests: reqs}
	return t.Slice(start, d)
}

func runFamily(f flags, setup robustness.Setup, policies []string) error {
	recorded, err := robustness.Recorded("test/traces")
	if err != nil {
		return err
	}
	reports, err := robustness.Run(append(recorded, robustness.FamilyDrawn(f.seed)...), policies, setup)
	if err != nil {
		return err
	}
	if f.counts {
		if !slices.Contains(policies, f.goalPolicy) || !slices.Contains(policies, autoscalebench.PolicyStatic) {
			return fmt.Errorf("--goal-policy=%s: --policies must name it and %s", f.goalPolicy, autoscalebench.PolicyStatic)
		}
		for _, r := range reports {
			o, _ := r.Outcome(f.goalPolicy)
			verdict := "meets every goal"
			if missed, _ := robustness.Missed(r, f.goalPolicy); len(missed) > 0 {
				verdict = "misses: " + strings.Join(missed, "; ")
			}
			fmt.Fprintf(os.Stderr, "%-18s %2d/%2d min  %5.1f%%  ups/downs %3d/%3d  unserved %d  %s\n",
				r.Workload.Name, o.MinutesMet, r.Reachable, 100*o.StaticFraction, o.Ups, o.Downs, o.Unserved, verdict)
		}
		fmt.Println(robustness.CountGoals(reports, f.goalPolicy))
		return nil
	}
	if f.asJSON {
		for _, r := range reports {
			if err := printJSON(r); err != nil {
				return err
			}
		}
		return nil
	}
	table := robustness.Markdown(reports, policies, offlinereplay.PolicyRecommended)
	if f.updateDocs == "" {
		fmt.Print(table)
		return nil
	}
	return robustness.UpdateDocs(f.updateDocs, table)
}

// jsonOutcome has the fields of the bench's report.json, and what only a
// replay knows.
type jsonOutcome struct {
	Workload         string  `json:"workload"`
	SLOSeconds       float64 `json:"sloSeconds"`
	Policy           string  `json:"policy"`
	MinutesMet       int     `json:"minutesMet"`
	Minutes          int     `json:"minutes"`
	GPUHours         float64 `json:"gpuHours"`
	StaticFraction   float64 `json:"staticFraction"`
	Unserved         int     `json:"unserved"`
	Rejected         int     `json:"rejected"`
	ScaleUps         int     `json:"scaleUps"`
	ScaleDowns       int     `json:"scaleDowns"`
	ReachableMinutes int     `json:"reachableMinutes"`
	// NeedReading is the needs a reference's run asked for.
	NeedReading string `json:"needReading,omitempty"`
}

func printJSON(r robustness.Report) error {
	enc := json.NewEncoder(os.Stdout)
	for _, o := range r.Outcomes {
		if err := enc.Encode(jsonOutcome{Workload: r.Workload.Name, SLOSeconds: r.SLO.Seconds(), Policy: o.Policy,
			MinutesMet: o.MinutesMet, Minutes: o.Minutes, GPUHours: o.GPUHours, StaticFraction: o.StaticFraction,
			Unserved: o.Unserved, Rejected: o.Rejected, ScaleUps: o.Ups, ScaleDowns: o.Downs, ReachableMinutes: r.Reachable,
			NeedReading: o.NeedReading}); err != nil {
			return err
		}
	}
	return nil
}

// minutes is how many of r's minutes had arrivals, which every policy
// replayed counts alike.
func minutes(r robustness.Report) int {
	if len(r.Outcomes) == 0 {
		return 0
	}
	return r.Outcomes[0].Minutes
}

// partsPrinter prints the first estimate of each minute, if on.
func partsPrinter(on bool, prefix string) func(time.Time, capacity.Estimate) {
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
		fmt.Printf("%s  minute %2d: ready %2d demand %5.1f forecast %5.1f | KV term %4.1f (slots %5.1f per replica %4.1f disp %.3f late %.3f res %5.1fs slack %4.2fs) | prefill term %4.1f (busy %4.2f, backlog %4.2f, max busy %.3f, disp %.3f, over %.3f) | ttft %5.2f corr %.2f | needed %5.1f\n",
			prefix, m, e.Replicas, e.Demand, e.Forecast, e.KVNeeded, e.Slots, e.PerReplica, e.KVDispersion, e.LateBudget, e.Residence, e.Slack,
			e.PrefillNeeded, e.PrefillBusy, e.PrefillBacklog, e.Prefill.MaxBusy, e.Dispersion, e.Prefill.OverObjective, e.MeasuredTTFT, e.Correction, e.Needed)
	}
}

// disaggPartsPrinter prints, per policy and pool, the first estimate of
// each minute (--capacity-parts with --disaggregated).
func disaggPartsPrinter() func(string, time.Time, string, capacity.Estimate) {
	printers := map[string]func(time.Time, capacity.Estimate){}
	return func(policy string, now time.Time, pool string, e capacity.Estimate) {
		key := policy + " " + pool
		p, ok := printers[key]
		if !ok {
			p = partsPrinter(true, fmt.Sprintf("%-11s %-7s", policy, pool))
			printers[key] = p
		}
		p(now, e)
	}
}

func report(o robustness.Outcome, r robustness.Report) {
	static, _ := r.Outcome(autoscalebench.PolicyStatic)
	var lost []string
	for m, ok := range o.MetMinute {
		if !ok && m < len(static.MetMinute) && static.MetMinute[m] {
			lost = append(lost, fmt.Sprintf("%d (%.2fs)", m, o.P90[m]))
		}
	}
	reading := ""
	if o.NeedReading != "" {
		reading = "  on " + o.NeedReading + " needs"
	}
	fmt.Printf("%-24s SLO minutes %3d/%d  of static %6.1f%%  ups/downs %3d/%3d  peak %3d  unserved %d  rejected %d%s\n",
		o.Policy, o.MinutesMet, o.Minutes, 100*o.StaticFraction, o.Ups, o.Downs, o.Peak, o.Unserved, o.Rejected, reading)
	if len(lost) > 0 && len(lost) <= 12 {
		fmt.Printf("%24s minutes static meets, lost: %s\n", "", strings.Join(lost, ", "))
	}
}

// printNeed prints, per minute, the arrivals and the fewest replicas that
// meet that minute's SLO, in each reading setup.Need asks for.
func printNeed(w robustness.Workload, setup robustness.Setup) error {
	slo, static, _, err := robustness.ChooseSLO(w, setup.Profile)
	if err != nil {
		return err
	}
	readings, err := setup.Readings(w.Requests, slo, static)
	if err != nil {
		return err
	}
	arrivals := make([]int, len(readings[0].Need))
	for _, r := range w.Requests {
		arrivals[int(r.At/time.Minute)]++
	}
	for m := range arrivals {
		fmt.Printf("minute %2d: %3d requests, need", m, arrivals[m])
		for _, r := range readings {
			fmt.Printf(" %d (%s)", r.Need[m], r.Name)
		}
		fmt.Println()
	}
	return nil
}

// runDisagg prints the disaggregated workload's table
// (offlinereplay.DisaggBench, as TestDisaggregatedGoal runs it).
func runDisagg(f flags) error {
	slo := f.slo
	if slo == 0 {
		slo = 2 * time.Second
	}
	w := workload.Disaggregated()
	b := offlinereplay.NewDisaggBench(slice(w.Generate(f.seed), f.start, f.duration), slo, f.itl)
	b.Config.SyncPhase = f.phase
	if f.parts {
		b.Parts = disaggPartsPrinter()
	}
	static, out, err := b.Run()
	if err != nil {
		return err
	}
	fmt.Printf("%s (%s), TTFT p90 %v and ITL p90 %v:\n\n%s\n%s", w.Name, w.About, slo, f.itl, offlinereplay.DisaggTable(static, out), b.Lost(out))
	return nil
}
