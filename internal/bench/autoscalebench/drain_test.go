package autoscalebench

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
	"github.com/gpuscale/gpuscale/pkg/signal/recommend"
)

func TestSplitPolicy(t *testing.T) {
	for _, tc := range []struct {
		name, policy string
		drain        bool
	}{
		{"capacity", "capacity", true},
		{"capacity+abort", "capacity", false},
		{"queue-depth+abort+abort", "queue-depth+abort", false},
	} {
		if p, d := splitPolicy(tc.name); p != tc.policy || d != tc.drain {
			t.Errorf("splitPolicy(%q) = %q, %v; want %q, %v", tc.name, p, d, tc.policy, tc.drain)
		}
	}
	if got := namespaceFor("capacity+abort"); got != "replay-capacity-abort" {
		t.Errorf("namespace %q is not a DNS label", got)
	}
}

// TestStreamDrain: the drain recommended for a slice covers its longest
// stream, simulated the way the replay's replicas serve it, and grows
// with the streams.
func TestStreamDrain(t *testing.T) {
	p := inferencesim.L4Profile()
	var longest time.Duration
	tests := []struct {
		name string
		reqs []trace.Request
	}{
		{"short answers", steady(2, 2*time.Minute)},
		{"long answers", func() []trace.Request {
			r := steady(2, 2*time.Minute)
			for i := range r {
				r[i].GeneratedTokens = 1000
			}
			return r
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var totals []time.Duration
			if _, err := simulate(tt.reqs, p, 2, func(c inferencesim.Completion) { totals = append(totals, c.Total) }); err != nil {
				t.Fatal(err)
			}
			d, err := streamDrain(tt.reqs, p, 2)
			if err != nil {
				t.Fatal(err)
			}
			if top := slices.Max(totals); d.Longest < top || d.PreStop < top+recommend.EndpointLag || d.Grace <= d.PreStop {
				t.Errorf("longest stream %v; drain %+v does not cover it", top, d)
			}
			if d.Streams != float64(len(tt.reqs)) {
				t.Errorf("%v streams measured, want %d", d.Streams, len(tt.reqs))
			}
			if d.Longest <= longest {
				t.Errorf("longer answers measured %v, no longer than %v", d.Longest, longest)
			}
			longest = d.Longest
		})
	}
}

// TestDrainPodRoundsUp: the template's wall-time seconds, on the
// compressed clock, cover at least the recommended drain.
func TestDrainPodRoundsUp(t *testing.T) {
	d := recommend.Drain{PreStop: 25 * time.Second, Grace: 35 * time.Second}
	w := workload("ns", "l4-llama-3.1-8b", 1, time.Second, func(tmpl *corev1.PodTemplateSpec) { drainPod(tmpl, d, 6) })
	spec := w.Spec.Template.Spec
	sleep := spec.Containers[0].Lifecycle.PreStop.Sleep.Seconds
	if sleep != 5 || *spec.TerminationGracePeriodSeconds != 6 {
		t.Errorf("preStop %d s, grace %d s at 6x; want 5 (25/6 rounded up) and 6", sleep, *spec.TerminationGracePeriodSeconds)
	}
	if plain := workload("ns", "l4-llama-3.1-8b", 1, time.Second, nil); plain.Spec.Template.Spec.Containers[0].Lifecycle != nil {
		t.Error("a workload without drain has a preStop hook")
	}
}

// TestDrainModes: a plan drains as a vLLM that exits once idle unless told
// otherwise, each mode puts its own form of the recommended drain on the
// template, and an unknown mode is refused.
func TestDrainModes(t *testing.T) {
	reqs := steady(2, 3*time.Minute)
	for i := range reqs {
		reqs[i].GeneratedTokens = 600 // streams of tens of seconds
	}
	tr := &trace.Trace{Requests: reqs}
	cfg := DefaultConfig("steady", tr)
	cfg.DrainMode = ""
	p, err := NewPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p.DrainMode != DrainWait {
		t.Fatalf("default drain %q, want %q", p.DrainMode, DrainWait)
	}
	d := p.Drain
	tests := []struct {
		mode              DrainMode
		preStop, grace    time.Duration
		shutdownTimeout   time.Duration // 0: no --shutdown-timeout
		coversWithinSleep bool
	}{
		{DrainWait, d.Wait.PreStop, d.Wait.Grace, d.Wait.ShutdownTimeout, false},
		{DrainSleep, d.PreStop, d.Grace, 0, true},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			w := workload("ns", p.Profile, 1, time.Second, tt.mode.template(d, 1))
			spec := w.Spec.Template.Spec
			c := spec.Containers[0]
			if got := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second; got != tt.preStop {
				t.Errorf("preStop sleep %v, want %v", got, tt.preStop)
			}
			if got := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second; got != tt.grace {
				t.Errorf("grace %v, want %v", got, tt.grace)
			}
			var timeout string
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, "--shutdown-timeout="); ok {
					timeout = v
				}
			}
			if want := ""; tt.shutdownTimeout > 0 {
				want = strconv.Itoa(int(tt.shutdownTimeout.Seconds()))
				if timeout != want {
					t.Errorf("--shutdown-timeout=%q, want %q", timeout, want)
				}
			} else if timeout != want {
				t.Errorf("a sleep drain sets --shutdown-timeout=%s", timeout)
			}
			if covers := tt.preStop >= d.Longest; covers != tt.coversWithinSleep {
				t.Errorf("the sleep (%v) covers the longest stream (%v): %v, want %v", tt.preStop, d.Longest, covers, tt.coversWithinSleep)
			}
		})
	}
	cfg.DrainMode = "forever"
	if _, err := NewPlan(cfg); err == nil || !strings.Contains(err.Error(), "unknown drain") {
		t.Errorf("an unknown drain mode: %v", err)
	}
}
