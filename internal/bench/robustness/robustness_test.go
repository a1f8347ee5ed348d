package robustness

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/autoscalebench"
	"github.com/gpuscale/gpuscale/internal/bench/offlinereplay"
	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/internal/bench/trace/tracetest"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
	"github.com/gpuscale/gpuscale/pkg/signal/recommend"
)

func outcome(policy string, met, minutes int, static, clair float64, unserved, events int) Outcome {
	return Outcome{Policy: policy, Result: offlinereplay.Result{MinutesMet: met, Unserved: unserved}, Minutes: minutes,
		StaticFraction: static, ClairvoyantFraction: clair, ScaleEvents: events}
}

func TestGoals(t *testing.T) {
	rep := func(name string, bursty bool, rec Outcome) Report {
		return Report{Workload: Workload{Name: name, Bursty: bursty}, Outcomes: []Outcome{
			outcome(autoscalebench.PolicyStatic, 40, 40, 1, 2, 0, 0), rec,
			outcome(offlinereplay.PolicyClairvoyant, 40, 40, 0.5, 1, 0, 10)}}
	}
	reports := []Report{
		rep("fine", false, outcome("rec", 38, 40, 0.9, 1.2, 0, 10)),
		rep("bursty and dear", true, outcome("rec", 40, 40, 0.85, 1.2, 0, 10)),
		rep("misses", false, outcome("rec", 30, 40, 0.7, 1.2, 2, 10)),
	}
	failed := map[string]bool{}
	for _, c := range Goals(reports, "rec") {
		if !c.Met {
			failed[c.Workload+": "+c.Goal] = true
		}
	}
	for _, want := range []string{
		"bursty and dear: GPU-hours <= 80% of static's (bursty)",
		"misses: nothing unserved",
		"misses: SLO minutes >= 90% of static's",
	} {
		if !failed[want] {
			t.Errorf("goal %q not failed; failed: %v", want, failed)
		}
	}
	if len(failed) != 3 {
		t.Errorf("failed %v; want exactly the three above (median 1.2x at 95%%, 30 events in 120 minutes pass)", failed)
	}
}

func TestChooseSLO(t *testing.T) {
	var reqs []trace.Request
	for i := range 600 { // 2 requests/s of 6,000-token prompts: 1.5 s of prefill each
		reqs = append(reqs, trace.Request{At: time.Duration(i) * 500 * time.Millisecond, ContextTokens: 6000, GeneratedTokens: 20})
	}
	slo, static, met, err := ChooseSLO(Workload{Requests: reqs}, inferencesim.L4Profile())
	if err != nil || slo != 2*time.Second || static < 1 || met != 5 {
		t.Errorf("ChooseSLO = %v, %d replicas meeting %d minutes, %v; want 2s (1s is below a prefill), every minute", slo, static, met, err)
	}
	slo, _, _, err = ChooseSLO(Workload{Requests: reqs, SLO: 5 * time.Second}, inferencesim.L4Profile())
	if err != nil || slo != 5*time.Second {
		t.Errorf("a workload's own SLO: %v, %v", slo, err)
	}
}

func TestUpdateDocs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(path, []byte("before\n"+BeginMarker+"\nold table\n"+EndMarker+"\nafter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := UpdateDocs(path, "new table\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if got, want := string(b), "before\n"+BeginMarker+"\nnew table\n"+EndMarker+"\nafter\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if err := os.WriteFile(path, []byte("no markers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := UpdateDocs(path, "x"); err == nil || !strings.Contains(err.Error(), "markers") {
		t.Errorf("a file without markers: %v", err)
	}
}

// TestMissed: a workload's missed goals are its own, whatever the other
// workloads or the family's median do, and a report without the policy's
// outcome cannot be judged.
func TestMissed(t *testing.T) {
	rep := func(bursty bool, rec ...Outcome) Report {
		return Report{Workload: Workload{Name: "w", Bursty: bursty},
			Outcomes: append([]Outcome{outcome(autoscalebench.PolicyStatic, 40, 40, 1, 2, 0, 0)}, rec...)}
	}
	for _, tc := range []struct {
		name   string
		r      Report
		want   []string
		wantOK bool
	}{
		{"meets all", rep(false, outcome("rec", 36, 40, 1, 1, 0, 100)), nil, true},
		{"one minute short", rep(false, outcome("rec", 35, 40, 0.5, 1, 0, 0)), []string{"SLO minutes >= 90% of static's"}, true},
		{"bursty at 81%", rep(true, outcome("rec", 40, 40, 0.81, 1, 0, 0)), []string{"GPU-hours <= 80% of static's (bursty)"}, true},
		{"not bursty at 81%", rep(false, outcome("rec", 40, 40, 0.81, 1, 0, 0)), nil, true},
		{"unserved and dear", rep(false, outcome("rec", 40, 40, 1.01, 1, 1, 0)), []string{"nothing unserved", "GPU-hours <= static's"}, true},
		{"no outcome", rep(false), nil, false},
	} {
		got, ok := Missed(tc.r, "rec")
		if ok != tc.wantOK || strings.Join(got, "; ") != strings.Join(tc.want, "; ") {
			t.Errorf("%s: Missed = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.wantOK)
		}
	}
}

func TestCountGoals(t *testing.T) {
	rep := func(name string, bursty bool, rec Outcome) Report {
		return Report{Workload: Workload{Name: name, Bursty: bursty}, Outcomes: []Outcome{
			outcome(autoscalebench.PolicyStatic, 40, 40, 1, 2, 0, 0), rec}}
	}
	reports := []Report{
		rep("fine", false, outcome("rec", 38, 40, 0.9, 1.2, 0, 10)),
		rep("bursty, over 80%", true, outcome("rec", 40, 40, 0.85, 1.2, 0, 7)),
		rep("bursty, over static", true, outcome("rec", 40, 40, 1.1, 1.2, 0, 3)),
		rep("short and unserved", false, outcome("rec", 35, 40, 0.7, 1.2, 2, 5)),
		rep("dear", false, outcome("rec", 36, 40, 1.01, 1.2, 0, 5)),
		{Workload: Workload{Name: "no recommended outcome"}, Outcomes: []Outcome{outcome(autoscalebench.PolicyStatic, 40, 40, 1, 2, 0, 0)}},
	}
	got := CountGoals(reports, "rec")
	want := Counts{MinutesShort: 1, CostOver: 2, BurstyOver: 2, Bursty: 2, Workloads: 5, Unserved: 1, Events: 30, EventMinutes: 200}
	if got != want {
		t.Fatalf("CountGoals = %+v\nwant %+v", got, want)
	}
	for _, tc := range []struct {
		name            string
		c               Counts
		noWorse, better bool
	}{
		{"the same", want, true, false},
		{"fewer events", func() Counts { c := want; c.Events--; return c }(), true, true},
		{"fewer short, one more over static", func() Counts { c := want; c.MinutesShort--; c.CostOver++; return c }(), false, false},
		{"more unserved", func() Counts { c := want; c.Unserved++; return c }(), false, false},
	} {
		if tc.c.NoWorse(want) != tc.noWorse || tc.c.Better(want) != tc.better {
			t.Errorf("%s: NoWorse %v Better %v, want %v and %v", tc.name, tc.c.NoWorse(want), tc.c.Better(want), tc.noWorse, tc.better)
		}
	}
	if s := want.String(); s != "| 1 | 2 | 2 of 2 | 1 | 30 |" {
		t.Errorf("String = %q", s)
	}
}

// TestMaxOfStatic: Setup.MaxOfStatic bounds the autoscaled policies'
// replicas at that multiple of static provisioning's; at 1 the bill can
// never pass static's. On the on-off shape the recommended policy
// overshoots static's replicas in its first two cycles when allowed twice
// as many, so the bound is what holds it.
func TestMaxOfStatic(t *testing.T) {
	w := familyShape(t, "on-off")
	w.Requests = sliceTo(w.Requests, 15*time.Minute) // two on-off cycles
	for _, tc := range []struct {
		multiple  float64
		overshoot bool // the peak passes static's replicas
	}{{2, true}, {1, false}} {
		setup := DefaultSetup()
		setup.MaxOfStatic = tc.multiple
		reps, err := Run([]Workload{w}, []string{autoscalebench.PolicyStatic, offlinereplay.PolicyRecommended}, setup)
		if err != nil {
			t.Fatal(err)
		}
		rec, ok := reps[0].Outcome(offlinereplay.PolicyRecommended)
		if !ok {
			t.Fatal("no outcome of the recommended policy")
		}
		static := reps[0].Static
		t.Logf("maxReplicas %gx static's %d: peak %d, %.0f%% of static's GPU-hours", tc.multiple, static, rec.Peak, 100*rec.StaticFraction)
		if bound := int(math.Ceil(tc.multiple * float64(static))); rec.Peak > bound {
			t.Errorf("%gx: peak %d, want at most %d", tc.multiple, rec.Peak, bound)
		}
		if got := rec.Peak > static; got != tc.overshoot {
			t.Errorf("%gx: peak %d above static's %d is %v, want %v", tc.multiple, rec.Peak, static, got, tc.overshoot)
		}
		if tc.multiple == 1 && rec.StaticFraction > 1 {
			t.Errorf("maxReplicas at static's: %.0f%% of static's GPU-hours", 100*rec.StaticFraction)
		}
	}
}

// TestMarginOnARamp: the README's HPA holds the capacity signal at
// recommend.CapacityTarget, a quarter below the demand, because a fleet
// held at exactly the demand is short whenever the demand grows. On the
// ramp shape's first 20 minutes the margin meets at least 90% of static's
// SLO minutes, and the same signal at value 1 does not.
func TestMarginOnARamp(t *testing.T) {
	w := familyShape(t, "ramp-up")
	w.Requests = sliceTo(w.Requests, 20*time.Minute)
	minutes := map[float64]int{}
	for _, target := range []float64{recommend.CapacityTarget, 1} {
		setup := DefaultSetup()
		setup.Tweak = func(o *offlinereplay.PolicyOptions) { o.CapacityTarget = target }
		reps, err := Run([]Workload{w}, []string{autoscalebench.PolicyStatic, offlinereplay.PolicyRecommended}, setup)
		if err != nil {
			t.Fatal(err)
		}
		rec, ok := reps[0].Outcome(offlinereplay.PolicyRecommended)
		st, ok2 := reps[0].Outcome(autoscalebench.PolicyStatic)
		if !ok || !ok2 {
			t.Fatal("no outcome of the recommended or static policy")
		}
		t.Logf("value %g: %d of static's %d SLO minutes, %.0f%% of its GPU-hours", target, rec.MinutesMet, st.MinutesMet, 100*rec.StaticFraction)
		if rec.StaticFraction > 1 {
			t.Errorf("value %g: %.0f%% of static's GPU-hours with maxReplicas at its fleet", target, 100*rec.StaticFraction)
		}
		minutes[target] = rec.MinutesMet
		if target == recommend.CapacityTarget && float64(rec.MinutesMet) < MinMinutesShare*float64(st.MinutesMet) {
			t.Errorf("value %g: %d SLO minutes, under %.0f%% of static's %d", target, rec.MinutesMet, 100*MinMinutesShare, st.MinutesMet)
		}
	}
	if minutes[recommend.CapacityTarget] <= minutes[1] {
		t.Errorf("the margin met %d SLO minutes, value 1 %d: the margin buys nothing on the ramp", minutes[recommend.CapacityTarget], minutes[1])
	}
}

// familyShape is the family's workload of that name.
func familyShape(t *testing.T, name string) Workload {
	t.Helper()
	for _, c := range Family() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no %s shape in the family", name)
	return Workload{}
}

// TestFractionWithoutStatic: a run that does not ask for static
// provisioning still divides by its bill (replayed, not reported), as a run
// that asks for it does; it was NaN, and --json failed on it.
func TestFractionWithoutStatic(t *testing.T) {
	w := familyShape(t, "on-off")
	w.Requests = sliceTo(w.Requests, 8*time.Minute)
	withStatic, err := Run([]Workload{w}, []string{autoscalebench.PolicyStatic, offlinereplay.PolicyRecommended}, DefaultSetup())
	if err != nil {
		t.Fatal(err)
	}
	alone, err := Run([]Workload{w}, []string{offlinereplay.PolicyRecommended}, DefaultSetup())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(alone[0].Outcomes); n != 1 {
		t.Fatalf("%d outcomes, want only the one asked for", n)
	}
	want, _ := withStatic[0].Outcome(offlinereplay.PolicyRecommended)
	got := alone[0].Outcomes[0]
	if math.IsNaN(got.StaticFraction) || got.StaticFraction != want.StaticFraction {
		t.Errorf("fraction of static's bill %v alone, %v beside static", got.StaticFraction, want.StaticFraction)
	}
}

// TestReferencesKeepTheBetterReading: by default each reference runs on
// both readings of the needs and reports the better run (more minutes,
// then fewer GPU-hours), named by its reading; a reading asked for alone is
// what runs.
func TestReferencesKeepTheBetterReading(t *testing.T) {
	w := Workload{Name: "burst then quiet", Requests: tracetest.BurstThenQuiet(), SLO: time.Second}
	policies := []string{offlinereplay.PolicyClairvoyant, offlinereplay.PolicyReactive}
	runWith := func(reading NeedReading) Report {
		t.Helper()
		setup := DefaultSetup()
		setup.Need = reading
		reps, err := Run([]Workload{w}, policies, setup)
		if err != nil {
			t.Fatal(err)
		}
		return reps[0]
	}
	whole, seq, best := runWith(NeedWholeTrace), runWith(NeedSequential), runWith(NeedBest)
	for _, p := range policies {
		ow, _ := whole.Outcome(p)
		oseq, _ := seq.Outcome(p)
		ob, ok := best.Outcome(p)
		if !ok {
			t.Fatalf("%s: no outcome", p)
		}
		if ow.NeedReading != ReadingWholeTrace || oseq.NeedReading != ReadingSequential {
			t.Errorf("%s: readings %q and %q, want %q and %q", p, ow.NeedReading, oseq.NeedReading, ReadingWholeTrace, ReadingSequential)
		}
		want := ow
		if oseq.MinutesMet > ow.MinutesMet || (oseq.MinutesMet == ow.MinutesMet && oseq.ReplicaSeconds < ow.ReplicaSeconds) {
			want = oseq
		}
		t.Logf("%s: whole-trace %d min %.0f s, sequential %d min %.0f s, best on %s", p, ow.MinutesMet, ow.ReplicaSeconds, oseq.MinutesMet, oseq.ReplicaSeconds, ob.NeedReading)
		if ob.NeedReading != want.NeedReading || ob.MinutesMet != want.MinutesMet || ob.ReplicaSeconds != want.ReplicaSeconds {
			t.Errorf("%s: best is %d minutes at %.0f s on %s, want %d at %.0f s on %s", p,
				ob.MinutesMet, ob.ReplicaSeconds, ob.NeedReading, want.MinutesMet, want.ReplicaSeconds, want.NeedReading)
		}
	}
	if c, _ := seq.Outcome(offlinereplay.PolicyClairvoyant); c.ReplicaSeconds >= mustOutcome(t, whole, offlinereplay.PolicyClairvoyant).ReplicaSeconds {
		t.Errorf("the clairvoyant reference costs %.0f replica-seconds on sequential needs, want less than on the whole trace's (the burst's backlog read as the quiet minutes' need)", c.ReplicaSeconds)
	}
	if !strings.Contains(Markdown([]Report{seq}, policies, offlinereplay.PolicyClairvoyant), "†") {
		t.Error("a run on sequential needs is not marked in the table")
	}
	if strings.Contains(Markdown([]Report{whole}, policies, offlinereplay.PolicyClairvoyant), "†") {
		t.Error("a table with no run on sequential needs marks one")
	}
}

func mustOutcome(t *testing.T, r Report, policy string) Outcome {
	t.Helper()
	o, ok := r.Outcome(policy)
	if !ok {
		t.Fatalf("%s: no outcome", policy)
	}
	return o
}

func TestParseNeedReading(t *testing.T) {
	for _, tc := range []struct {
		name string
		want NeedReading
		err  bool
	}{
		{name: ReadingBest, want: NeedBest},
		{name: ReadingWholeTrace, want: NeedWholeTrace},
		{name: ReadingSequential, want: NeedSequential},
		{name: "", err: true},
		{name: "Sequential", err: true},
	} {
		got, err := ParseNeedReading(tc.name)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("ParseNeedReading(%q) = %v, %v; want %v, error %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}
