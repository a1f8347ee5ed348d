package offlinereplay

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/autoscalebench"
	"github.com/gpuscale/gpuscale/pkg/signal/capacity"
	"github.com/gpuscale/gpuscale/pkg/signal/recommend"
)

func TestNewPolicy(t *testing.T) {
	base := PolicyOptions{Schedule: "37s:9", MaxReplicas: 18, Need: []int{1, 2},
		Targets: autoscalebench.Targets{GPUUtilization: 70, QueueDepth: 1, RequestsRunning: 16, TTFT: time.Second, ModelLoad: time.Minute}}
	tests := []struct {
		name       string
		policy     string
		edit       func(*PolicyOptions)
		wantTarget float64
		wantDown   time.Duration
		wantErr    string
	}{
		{name: "running-requests at the bench's target", policy: "running-requests", wantTarget: 16, wantDown: 300 * time.Second},
		{name: "running-requests at a swept target", policy: "running-requests", edit: func(o *PolicyOptions) { o.Targets.RequestsRunning = 17 }, wantTarget: 17, wantDown: 300 * time.Second},
		{name: "queue depth", policy: "queue-depth", wantTarget: 1, wantDown: 300 * time.Second},
		{name: "queue depth, recommended behavior", policy: "queue-depth-recommended", wantTarget: 1, wantDown: time.Minute},
		{name: "GPU utilization", policy: "gpu-utilization", wantTarget: 70, wantDown: 300 * time.Second},
		{name: "TTFT p90", policy: "ttft-p90", wantDown: 300 * time.Second},
		{name: "llm-d sets the scale itself", policy: "llm-d-slo", wantDown: 0},
		{name: "capacity with the recommended window", policy: "capacity", wantDown: time.Minute},
		{name: "recommended", policy: "recommended", wantDown: time.Minute},
		{name: "capacity with a swept window", policy: "capacity", edit: func(o *PolicyOptions) { o.DownWindow = 5 * time.Minute }, wantDown: 5 * time.Minute},
		{name: "clairvoyant", policy: "clairvoyant", wantDown: 0},
		{name: "reactive holds a start-up by default", policy: "reactive", wantDown: time.Minute},
		{name: "reactive with a swept hold", policy: "reactive", edit: func(o *PolicyOptions) { o.ReactiveHold = 5 * time.Minute }, wantDown: 5 * time.Minute},
		{name: "reactive without needs", policy: "reactive", edit: func(o *PolicyOptions) { o.Need = nil }, wantErr: "needs each minute's need"},
		{name: "clairvoyant without needs", policy: "clairvoyant", edit: func(o *PolicyOptions) { o.Need = nil }, wantErr: "needs each minute's need"},
		{name: "a schedule without its count", policy: "schedule", edit: func(o *PolicyOptions) { o.Schedule = "37s" }, wantErr: "want DURATION:N"},
		{name: "a schedule with a bad step", policy: "schedule", edit: func(o *PolicyOptions) { o.Schedule = "7s:3,6m:x" }, wantErr: "not a replica count"},
		{name: "a schedule of steps", policy: "schedule", edit: func(o *PolicyOptions) { o.Schedule = "6m:10,7s:3" }, wantDown: time.Hour},
		{name: "an unknown policy", policy: "queue-size", wantErr: "unknown policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := base
			if tt.edit != nil {
				tt.edit(&o)
			}
			p, b, err := NewPolicy(tt.policy, o)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("NewPolicy(%q) error %v, want one containing %q", tt.policy, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewPolicy(%q): %v", tt.policy, err)
			}
			if b.DownWindow != tt.wantDown {
				t.Errorf("scale-down window %v, want %v", b.DownWindow, tt.wantDown)
			}
			if b.MaxReplicas != o.MaxReplicas {
				t.Errorf("max replicas %d, want %d", b.MaxReplicas, o.MaxReplicas)
			}
			if pa, ok := p.(podsAverage); ok && pa.target != tt.wantTarget {
				t.Errorf("target %v, want %v", pa.target, tt.wantTarget)
			}
		})
	}
}

// TestScheduleSteps: a schedule asks for each step's count from its time
// on, whatever order the steps were given in, and for the replicas it has
// before the first.
func TestScheduleSteps(t *testing.T) {
	p, b, err := NewPolicy(PolicySchedule, PolicyOptions{Schedule: "6m37s:10,7s:3", MaxReplicas: 4})
	if err != nil {
		t.Fatal(err)
	}
	h := newHPA(b, 3)
	if b.MaxReplicas != 10 || h.decide(origin.Add(15*time.Second), 10) != 10 {
		t.Errorf("max replicas %d, up from 3 to %d in one sync; want the largest step's 10", b.MaxReplicas, h.spec)
	}
	for _, tc := range []struct {
		at   time.Duration
		want int
	}{{0, 2}, {6 * time.Second, 2}, {7 * time.Second, 3}, {6 * time.Minute, 3}, {6*time.Minute + 37*time.Second, 10}, {time.Hour, 10}} {
		if got, _ := p.Recommend(View{Now: origin.Add(tc.at), Spec: 2}); got != tc.want {
			t.Errorf("at %v: %d replicas, want %d", tc.at, got, tc.want)
		}
	}
}

// TestClairvoyantLeadsByAStartup: the reference asks at each sync for the
// most any minute needs until its replicas would be Ready.
func TestClairvoyantLeadsByAStartup(t *testing.T) {
	c := needOracle{need: []int{2, 2, 7, 3, 1}, ahead: time.Minute + clairvoyantReach}
	for _, tc := range []struct {
		at   time.Duration
		want int
	}{
		{0, 2}, {29 * time.Second, 2}, {31 * time.Second, 7}, {2*time.Minute + 59*time.Second, 7},
		{3 * time.Minute, 3}, {4 * time.Minute, 1}, {10 * time.Minute, 1},
	} {
		if got, ok := c.Recommend(View{Now: origin.Add(tc.at)}); !ok || got != tc.want {
			t.Errorf("at %v: %d, want %d", tc.at, got, tc.want)
		}
	}
}

// TestReactiveAsksForTheCurrentMinute: the reactive reference asks at each
// sync for the need of the minute it is in, with its margin rounded up, and
// never for a minute ahead.
func TestReactiveAsksForTheCurrentMinute(t *testing.T) {
	need := []int{2, 2, 7, 3, 1}
	for _, tc := range []struct {
		margin float64
		at     time.Duration
		want   int
	}{
		{0, 0, 2}, {0, 59 * time.Second, 2}, {0, time.Minute, 2}, {0, 2 * time.Minute, 7},
		{0, 2*time.Minute + 59*time.Second, 7}, {0, 3 * time.Minute, 3}, {0, 10 * time.Minute, 1},
		{0.25, 2 * time.Minute, 9}, {0.25, 4 * time.Minute, 2}, {0.5, 0, 3},
	} {
		p, _, err := NewPolicy(PolicyReactive, PolicyOptions{Need: need, ReactiveMargin: tc.margin, MaxReplicas: 20,
			Targets: autoscalebench.Targets{ModelLoad: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := p.Recommend(View{Now: origin.Add(tc.at)}); !ok || got != tc.want {
			t.Errorf("margin %v at %v: %d, want %d", tc.margin, tc.at, got, tc.want)
		}
	}
}

// TestReactiveLookbackAsksForAQuantileOfThePast: with a lookback the
// reactive reference asks for the quantile (nearest rank) of the needs of
// the current minute and the lookback minutes before it, never of a minute
// ahead.
func TestReactiveLookbackAsksForAQuantileOfThePast(t *testing.T) {
	need := []int{2, 9, 4, 6, 1, 3}
	for _, tc := range []struct {
		lookback         int
		quantile, margin float64
		minute           int
		want             int
	}{
		{3, 0.75, 0, 0, 2},   // only minute 0 seen; minute 1's 9 is ahead
		{3, 0.75, 0, 4, 6},   // 1 4 6 9
		{3, 0.75, 0, 5, 4},   // 1 3 4 6
		{3, 1, 0, 5, 6},      // the most of 4 6 1 3
		{3, 0.25, 0, 4, 1},   // 1 4 6 9
		{3, 0.75, 0.5, 4, 9}, // 6 and half again
		{10, 1, 0, 5, 9},     // every minute so far
		{3, 0.75, 0, 20, 1},  // past the trace: nothing needed
	} {
		p, _, err := NewPolicy(PolicyReactive, PolicyOptions{Need: need, ReactiveLookback: tc.lookback, ReactiveQuantile: tc.quantile,
			ReactiveMargin: tc.margin, MaxReplicas: 20, Targets: autoscalebench.Targets{ModelLoad: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		at := origin.Add(time.Duration(tc.minute)*time.Minute + 30*time.Second)
		if got, ok := p.Recommend(View{Now: at}); !ok || got != tc.want {
			t.Errorf("lookback %d quantile %v margin %v at minute %d: %d, want %d", tc.lookback, tc.quantile, tc.margin, tc.minute, got, tc.want)
		}
	}
}

// TestSeasonalPeriod: a period is found once a whole one has been seen
// twice, and only where it predicts the next minute better than the
// minute before does.
func TestSeasonalPeriod(t *testing.T) {
	onOff := func(on, off, n int) []int { // n minutes of on at 9, off at 1
		var s []int
		for i := range n {
			if i%(on+off) < on {
				s = append(s, 9)
			} else {
				s = append(s, 1)
			}
		}
		return s
	}
	for _, tc := range []struct {
		name string
		seen []int
		want int
	}{
		{"too few minutes", []int{1, 9, 1}, 0},
		{"on-off, two periods seen", onOff(3, 2, 10), 5},
		{"on-off, one period and a half", onOff(3, 2, 7), 0},
		{"steady", []int{4, 4, 4, 4, 4, 4, 4, 4}, 0},
		{"a ramp: the minute before predicts best", []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0},
		{"alternating", []int{1, 5, 1, 5, 1, 5, 1, 5}, 2},
	} {
		if got := seasonalPeriod(tc.seen); got != tc.want {
			t.Errorf("%s: period %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestReactivePeriodicAsksAhead: with a period seen, the reactive reference
// asks a start-up ahead for what the minutes coming needed a period before,
// and without one it asks for the current minute's need alone.
func TestReactivePeriodicAsksAhead(t *testing.T) {
	// On at 9 for 3 minutes, off at 1 for 2, period 5; minute 10 starts
	// the third on-period.
	need := []int{9, 9, 9, 1, 1, 9, 9, 9, 1, 1, 9, 9, 9, 1, 1}
	for _, tc := range []struct {
		periodic bool
		minute   int
		want     int
	}{
		{false, 9, 1},  // the off-minute's own need
		{true, 9, 9},   // minute 10 needed 9 a period before (minute 5)
		{true, 8, 1},   // nine minutes seen: no whole period twice yet
		{true, 3, 1},   // too little seen for a period
		{true, 12, 9},  // on: its own need
		{true, 13, 9},  // 90 s from 13m30s reach minute 15, which needed 9 a period before
		{false, 20, 1}, // past the trace
	} {
		p, _, err := NewPolicy(PolicyReactive, PolicyOptions{Need: need, ReactivePeriodic: tc.periodic, MaxReplicas: 20,
			Targets: autoscalebench.Targets{ModelLoad: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		at := origin.Add(time.Duration(tc.minute)*time.Minute + 30*time.Second)
		if got, ok := p.Recommend(View{Now: at}); !ok || got != tc.want {
			t.Errorf("periodic %v at minute %d: %d, want %d", tc.periodic, tc.minute, got, tc.want)
		}
	}
}

// TestCapacityTarget: the capacity policy asks for the replicas that bring
// its signal to the target it is given, the README's by default.
func TestCapacityTarget(t *testing.T) {
	for _, tc := range []struct {
		target float64
		want   float64
	}{{0, recommend.CapacityTarget}, {1, 1}, {0.9, 0.9}} {
		p, _, err := NewPolicy(PolicyRecommended, PolicyOptions{CapacityTarget: tc.target, MaxReplicas: 20,
			Targets: autoscalebench.Targets{TTFT: time.Second, ModelLoad: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.(*capacityPolicy).target; got != tc.want {
			t.Errorf("CapacityTarget %v: target %v, want %v", tc.target, got, tc.want)
		}
	}
}

// TestPodsAverageCountsMissingPodsWhenScalingUp: as the HPA controller
// does, pods without a value count as 0 when the others ask for more.
func TestPodsAverageCountsMissingPodsWhenScalingUp(t *testing.T) {
	p := podsAverage{target: 1, value: waiting}
	ready := func(w int) PodView { return PodView{Ready: true, Data: true, Waiting: w} }
	for _, tc := range []struct {
		name string
		pods []PodView
		spec int
		want int
	}{
		{"within tolerance", []PodView{ready(1), ready(1)}, 2, 2},
		{"up", []PodView{ready(4), ready(2)}, 2, 6},
		{"up, a loading pod counted as 0", []PodView{ready(4), ready(2), {Loading: true}}, 3, 6},
		{"up absorbed by the loading pod", []PodView{ready(2), ready(1), {Loading: true}}, 3, 3},
		{"down", []PodView{ready(0), ready(1), ready(0), ready(0)}, 4, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, ok := p.Recommend(View{Pods: tc.pods, Spec: tc.spec}); !ok || got != tc.want {
				t.Errorf("Recommend = %d, %v; want %d", got, ok, tc.want)
			}
		})
	}
}

// TestRecommendedDownPeriodFollowsTheWindow: the recommended policy
// removes a replica per signal window, as `adapter recommend` advises for
// the adapter's --ttft-window, and with its loop closed waits the
// stabilization window after it.
func TestRecommendedDownPeriodFollowsTheWindow(t *testing.T) {
	open := func(c *capacity.Config) { c.MinCorrection, c.MaxCorrection = 1, 1 }
	for _, tc := range []struct {
		name        string
		window      time.Duration
		capacityCfg func(*capacity.Config)
		want        time.Duration // before the stabilization window
		closed      bool
	}{
		{"default window, loop closed", 0, nil, time.Minute, true},
		{"two-minute window, loop closed", 2 * time.Minute, nil, 2 * time.Minute, true},
		{"default window, loop open", 0, open, time.Minute, false},
		{"two-minute window, loop open", 2 * time.Minute, open, 2 * time.Minute, false},
	} {
		_, b, err := NewPolicy(PolicyRecommended, PolicyOptions{Window: tc.window, MaxReplicas: 20, Capacity: tc.capacityCfg,
			Targets: autoscalebench.Targets{TTFT: time.Second, ModelLoad: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		want := tc.want
		if tc.closed {
			want += b.DownWindow
		}
		if b.DownWindow <= 0 || !slices.Equal(b.Down, []Rate{Pods(1, want), Percent(10, want)}) {
			t.Errorf("%s: scale-down rates %+v after a %v window, want one replica or 10%% per %v", tc.name, b.Down, b.DownWindow, want)
		}
	}
}

// TestDownRates: the replay's scale-down options replace the period of
// every policy adapter recommend gives, the replicas of its Pods policies,
// and add a percent policy of the same period.
func TestDownRates(t *testing.T) {
	given := []Rate{Pods(1, time.Minute)}
	cases := []struct {
		name string
		o    PolicyOptions
		want []Rate
	}{
		{"none", PolicyOptions{}, []Rate{Pods(1, time.Minute)}},
		{"period", PolicyOptions{DownPeriod: 2 * time.Minute}, []Rate{Pods(1, 2*time.Minute)}},
		{"pods", PolicyOptions{DownPods: 2}, []Rate{Pods(2, time.Minute)}},
		{"pods and period", PolicyOptions{DownPods: 2, DownPeriod: 2 * time.Minute}, []Rate{Pods(2, 2*time.Minute)}},
		{"percent", PolicyOptions{DownPercent: 10}, []Rate{Pods(1, time.Minute), Percent(10, time.Minute)}},
		{"percent, pods and period", PolicyOptions{DownPercent: 10, DownPods: 3, DownPeriod: 90 * time.Second},
			[]Rate{Pods(3, 90*time.Second), Percent(10, 90*time.Second)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.o.downRates(given); !slices.Equal(got, tc.want) {
				t.Errorf("downRates = %+v, want %+v", got, tc.want)
			}
			if given[0] != Pods(1, time.Minute) {
				t.Fatalf("downRates modified its input: %+v", given)
			}
		})
	}
}
