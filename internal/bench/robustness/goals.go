package robustness

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gpuscale/gpuscale/internal/bench/autoscalebench"
	"github.com/gpuscale/gpuscale/internal/bench/offlinereplay"
)

// The goals the recommended policy is held to (issue #31), with one set
// of defaults on every workload.
const (
	// MinMinutesShare: SLO minutes at least this share of static's.
	MinMinutesShare = 0.9
	// MaxBurstyCost: GPU-hours at most this share of static's on bursty
	// workloads (at most static's on the others).
	MaxBurstyCost = 0.8
	// MaxClairvoyantCost: across the family, the median GPU-hours at most
	// this multiple of the clairvoyant reference's ...
	MaxClairvoyantCost = 1.3
	// MinClairvoyantMinutes: ... at this share or more of its SLO minutes.
	MinClairvoyantMinutes = 0.95
	// MaxEventsPerMinute: on average at most one scale event per three
	// minutes.
	MaxEventsPerMinute = 1.0 / 3
)

// Check is one goal on one workload, or across them.
type Check struct {
	Workload, Goal, Measured string
	Met                      bool
}

// Goals checks policy (the recommended one) against every goal.
func Goals(reports []Report, policy string) []Check {
	var checks []Check
	var costs, minutes []float64
	events, eventMinutes := 0, 0
	for _, r := range reports {
		o, ok := r.Outcome(policy)
		st, ok2 := r.Outcome(autoscalebench.PolicyStatic)
		if !ok || !ok2 {
			continue
		}
		name := r.Workload.Name
		checks = append(checks,
			Check{name, "nothing unserved", fmt.Sprintf("%d unserved (%d rejected apart)", o.Unserved, o.Rejected), o.Unserved == 0},
			Check{name, fmt.Sprintf("SLO minutes >= %.0f%% of static's", 100*MinMinutesShare),
				fmt.Sprintf("%d of static's %d", o.MinutesMet, st.MinutesMet), float64(o.MinutesMet) >= MinMinutesShare*float64(st.MinutesMet)})
		limit, goal := 1.0, "GPU-hours <= static's"
		if r.Workload.Bursty {
			limit, goal = MaxBurstyCost, fmt.Sprintf("GPU-hours <= %.0f%% of static's (bursty)", 100*MaxBurstyCost)
		}
		checks = append(checks, Check{name, goal, fmt.Sprintf("%.1f%%", 100*o.StaticFraction), o.StaticFraction <= limit})
		events += o.ScaleEvents
		eventMinutes += o.Minutes
		if cl, ok := r.Outcome(offlinereplay.PolicyClairvoyant); ok && isFamily(r) {
			costs = append(costs, o.ClairvoyantFraction)
			minutes = append(minutes, ratio(float64(o.MinutesMet), float64(cl.MinutesMet)))
		}
	}
	if len(costs) > 0 {
		mc, mm := median(costs), median(minutes)
		checks = append(checks, Check{"family", fmt.Sprintf("median GPU-hours <= %.1fx clairvoyant's, at >= %.0f%% of its SLO minutes", MaxClairvoyantCost, 100*MinClairvoyantMinutes),
			fmt.Sprintf("%.2fx, at %.0f%%", mc, 100*mm), mc <= MaxClairvoyantCost && mm >= MinClairvoyantMinutes})
	}
	if eventMinutes > 0 {
		rate := float64(events) / float64(eventMinutes)
		checks = append(checks, Check{"all", "<= 1 scale event per 3 minutes on average",
			fmt.Sprintf("%d events in %d minutes: 1 per %.1f minutes", events, eventMinutes, 1/rate), rate <= MaxEventsPerMinute})
	}
	return checks
}

// Missed is the goals of one workload that policy misses on r (the
// per-workload goals of Goals), none when it meets them all; ok is false
// when r has no outcome of policy or of static provisioning to judge it
// by.
func Missed(r Report, policy string) (missed []string, ok bool) {
	_, ok = r.Outcome(policy)
	_, ok2 := r.Outcome(autoscalebench.PolicyStatic)
	if !ok || !ok2 {
		return nil, false
	}
	for _, c := range Goals([]Report{r}, policy) {
		if c.Workload == r.Workload.Name && !c.Met {
			missed = append(missed, c.Goal)
		}
	}
	return missed, true
}

func isFamily(r Report) bool { return r.Workload.SLO == 0 }

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Markdown renders the robustness table: one row per workload, one column
// per policy, each cell the SLO minutes met (of static's) and the GPU-hours
// as a share of static's; then the goals.
func Markdown(reports []Report, policies []string, recommended string) string {
	var b strings.Builder
	sequential := false
	b.WriteString("| workload | SLO | static | " + strings.Join(policies, " | ") + " |\n|---|---:|---:|")
	b.WriteString(strings.Repeat("---:|", len(policies)) + "\n")
	for _, r := range reports {
		name := r.Workload.Name
		if r.Workload.Bursty {
			name += " (bursty)"
		}
		fmt.Fprintf(&b, "| %s | %v | %d replicas, %d/%d min |", name, r.SLO, r.Static, r.Reachable, minutesOf(r))
		for _, p := range policies {
			o, ok := r.Outcome(p)
			if !ok {
				b.WriteString(" - |")
				continue
			}
			cell := fmt.Sprintf("%d min, %.0f%%", o.MinutesMet, 100*o.StaticFraction)
			if o.Unserved > 0 {
				cell += fmt.Sprintf(", %d unserved", o.Unserved)
			}
			if o.NeedReading == ReadingSequential {
				cell += "†"
				sequential = true
			}
			if p == recommended {
				cell = "**" + cell + "**"
			}
			fmt.Fprintf(&b, " %s |", cell)
		}
		b.WriteString("\n")
	}
	b.WriteString("\nEach cell: SLO minutes met, and GPU-hours as a share of static provisioning's. Requests larger than a replica's KV cache are rejected, as vLLM rejects them, and counted in no minute.")
	if sequential {
		b.WriteString(" The references ran on both readings of each minute's need and kept the run with more SLO minutes, then fewer GPU-hours; † marks a run on the sequential needs (`offlinereplay.SequentialNeed`), the others ran on the whole trace's (`offlinereplay.MinuteNeed`).")
	}
	b.WriteString("\n\n")
	b.WriteString("| goal (" + recommended + ") | workload | measured | met |\n|---|---|---|---|\n")
	for _, c := range Goals(reports, recommended) {
		met := "yes"
		if !c.Met {
			met = "**no**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", c.Goal, c.Workload, c.Measured, met)
	}
	return b.String()
}

func minutesOf(r Report) int {
	if o, ok := r.Outcome(autoscalebench.PolicyStatic); ok {
		return o.Minutes
	}
	return 0
}

// Counts sums the goals over workloads: how many miss each per-workload
// goal, and the scale events. It is what a sweep of configurations
// compares (hack/robustness-sweep.sh): a configuration improves on another
// only when no count is worse.
type Counts struct {
	// MinutesShort counts the workloads that miss the SLO-minutes goal,
	// CostOver those that cost more than static provisioning (bursty ones
	// included), BurstyOver the bursty ones that cost more than
	// MaxBurstyCost of static's; Bursty is how many are bursty, Workloads
	// how many in all.
	MinutesShort, CostOver, BurstyOver, Bursty, Workloads int
	// Unserved counts the workloads with requests never served.
	Unserved int
	// Events are the scale events over EventMinutes minutes with arrivals.
	Events, EventMinutes int
}

// CountGoals is Counts for policy over reports.
func CountGoals(reports []Report, policy string) Counts {
	var c Counts
	for _, r := range reports {
		o, ok := r.Outcome(policy)
		st, ok2 := r.Outcome(autoscalebench.PolicyStatic)
		if !ok || !ok2 {
			continue
		}
		c.Workloads++
		if o.Unserved > 0 {
			c.Unserved++
		}
		if float64(o.MinutesMet) < MinMinutesShare*float64(st.MinutesMet) {
			c.MinutesShort++
		}
		if !(o.StaticFraction <= 1) {
			c.CostOver++
		}
		if r.Workload.Bursty {
			c.Bursty++
			if !(o.StaticFraction <= MaxBurstyCost) {
				c.BurstyOver++
			}
		}
		c.Events += o.ScaleEvents
		c.EventMinutes += o.Minutes
	}
	return c
}

// NoWorse reports whether c is at least as good as base on every count,
// and Better whether it is also strictly better on one.
func (c Counts) NoWorse(base Counts) bool {
	return c.MinutesShort <= base.MinutesShort && c.CostOver <= base.CostOver && c.BurstyOver <= base.BurstyOver &&
		c.Unserved <= base.Unserved && c.Events <= base.Events
}

// Better reports whether c is no worse than base and strictly better on a
// count.
func (c Counts) Better(base Counts) bool {
	return c.NoWorse(base) && c != base
}

// String is the counts as a row of the sweep's table.
func (c Counts) String() string {
	return fmt.Sprintf("| %d | %d | %d of %d | %d | %d |", c.MinutesShort, c.CostOver, c.BurstyOver, c.Bursty, c.Unserved, c.Events)
}
