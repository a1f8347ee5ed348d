package recommend

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

func secs(ss ...int) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = time.Duration(s) * time.Second
	}
	return out
}

func withStabilization(s int32) *autoscalingv2.HorizontalPodAutoscalerBehavior {
	return &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: &s}}
}

func TestRecommend(t *testing.T) {
	base := Workload{HPA: "demo/llm", Target: "Deployment/llm", GPUsPerPod: 1, GPUsPerNode: 8}
	cases := []struct {
		name          string
		mod           func(*Workload, *Autoscaler)
		wantStabilize int32
		wantWarnings  []string // substrings, one per warning, in order
	}{
		{"p95 rounded up to the sync period", func(w *Workload, _ *Autoscaler) { w.Startup = secs(40, 50, 95, 60) }, 105, nil},
		{"a minute's load and scheduling", func(w *Workload, _ *Autoscaler) { w.Startup = secs(63) }, 75, nil},
		{"fast start-up: at least 60s", func(w *Workload, _ *Autoscaler) { w.Startup = secs(5, 8, 12) }, 60, nil},
		{"exact step stays", func(w *Workload, _ *Autoscaler) { w.Startup = secs(90) }, 90, nil},
		{"nothing measured: HPA default", func(*Workload, *Autoscaler) {}, 300, []string{"no Ready pods"}},
		{"threshold under 1/8", func(w *Workload, ca *Autoscaler) { w.Startup = secs(30); ca.GPUUtilizationThreshold = 0.1 }, 60,
			[]string{"threshold 0.1 is not above 1/8: a node with one 1-GPU replica stays above the threshold and is never removed"}},
		{"threshold equal to one replica's share", func(w *Workload, ca *Autoscaler) {
			w.Startup, w.GPUsPerPod, ca.GPUUtilizationThreshold = secs(30), 2, 0.25
		}, 60, []string{"not above 2/8"}},
		{"threshold fine", func(w *Workload, ca *Autoscaler) { w.Startup = secs(30); ca.GPUUtilizationThreshold = 0.2 }, 60, nil},
		{"GPUs per node unknown: no threshold advice", func(w *Workload, ca *Autoscaler) {
			w.Startup, w.GPUsPerNode, ca.GPUUtilizationThreshold = secs(30), 0, 0.01
		}, 60, nil},
		{"grace period over the autoscaler's limit", func(w *Workload, _ *Autoscaler) {
			w.Startup, w.TerminationGracePeriod = secs(30), 900*time.Second
		}, 60, []string{"terminationGracePeriodSeconds 900 is over the cluster autoscaler's --max-graceful-termination-sec 600"}},
		{"grace period at the limit", func(w *Workload, _ *Autoscaler) {
			w.Startup, w.TerminationGracePeriod = secs(30), 600*time.Second
		}, 60, nil},
		{"current scale-down faster than start-up", func(w *Workload, _ *Autoscaler) {
			w.Startup, w.Current = secs(100, 200), withStabilization(60)
		}, 210, []string{"scales down after 1m0s of lower load, faster than its pods start (p95 3m20s)"}},
		{"default HPA window slower than start-up", func(w *Workload, _ *Autoscaler) { w.Startup = secs(200) }, 210, nil},
		{"default HPA window faster than a slow start-up", func(w *Workload, _ *Autoscaler) { w.Startup = secs(400) }, 405,
			[]string{"scales down after 5m0s"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, ca := base, DefaultAutoscaler()
			tc.mod(&w, &ca)
			r := Recommend(w, ca)
			down, up := r.Behavior.ScaleDown, r.Behavior.ScaleUp
			if got := *down.StabilizationWindowSeconds; got != tc.wantStabilize {
				t.Errorf("scale-down stabilization = %d, want %d", got, tc.wantStabilize)
			}
			if len(down.Policies) != 2 || down.Policies[0].Type != autoscalingv2.PodsScalingPolicy || down.Policies[0].Value != 1 ||
				down.Policies[1].Type != autoscalingv2.PercentScalingPolicy || down.Policies[1].Value != 10 || down.SelectPolicy != nil {
				t.Errorf("scale-down policies = %+v, want 1 pod or 10%% per period, the larger", down.Policies)
			}
			if *up.StabilizationWindowSeconds != 0 || *up.SelectPolicy != autoscalingv2.MaxChangePolicySelect || len(up.Policies) != 2 {
				t.Errorf("scale-up = %+v, want immediate, max of two policies", up)
			}
			if len(r.Warnings) != len(tc.wantWarnings) {
				t.Fatalf("warnings = %q, want %d", r.Warnings, len(tc.wantWarnings))
			}
			for i, want := range tc.wantWarnings {
				if !strings.Contains(r.Warnings[i], want) {
					t.Errorf("warning %d = %q, want it to contain %q", i, r.Warnings[i], want)
				}
			}
		})
	}
}

// TestScaleDownPeriod: one removal per signal window, in whole HPA syncs,
// and for the capacity signal's closed loop the stabilization window after
// it (75 s for a 63 s start-up; the HPA's default 300 s without one
// measured).
func TestScaleDownPeriod(t *testing.T) {
	cases := []struct {
		name    string
		window  time.Duration
		startup []time.Duration
		closed  bool
		want    int32
		reason  string
	}{
		{"the adapter's default window", 0, secs(63), true, 135, "stabilization window"},
		{"a two-minute window", 2 * time.Minute, secs(63), true, 195, "stabilization window"},
		{"a window just past a sync", 61 * time.Second, secs(63), true, 150, "stabilization window"},
		{"a short window: one sync", 10 * time.Second, secs(63), true, 90, "stabilization window"},
		{"a longer start-up: a longer stabilization window", 0, secs(100), true, 165, "stabilization window"},
		{"no start-up measured: the HPA's default window", 0, nil, true, 360, "stabilization window"},
		{"no closed loop (a role's pool, another metric): the signal's window", 0, secs(63), false, 60, "without a closed loop"},
		{"no closed loop, a two-minute window", 2 * time.Minute, secs(63), false, 120, "without a closed loop"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := Workload{HPA: "demo/llm", Startup: tc.startup, SignalWindow: tc.window, ClosedLoop: tc.closed, GPUsPerPod: 1, GPUsPerNode: 8}
			r := Recommend(w, DefaultAutoscaler())
			down := r.Behavior.ScaleDown.Policies
			want := []autoscalingv2.HPAScalingPolicy{
				{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: tc.want},
				{Type: autoscalingv2.PercentScalingPolicy, Value: 10, PeriodSeconds: tc.want},
			}
			if !slices.Equal(down, want) || r.Behavior.ScaleDown.SelectPolicy != nil {
				t.Errorf("scale-down policies %+v (select %v), want %+v, the larger taken", down, r.Behavior.ScaleDown.SelectPolicy, want)
			}
			why := r.Reasons["scaleDown.policies[0].periodSeconds"]
			if !strings.Contains(why, "--ttft-window") || !strings.Contains(why, tc.reason) {
				t.Errorf("reason %q does not say why (want it to name --ttft-window and %q)", why, tc.reason)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	cases := []struct {
		in   []time.Duration
		q    float64
		want time.Duration
	}{
		{nil, 0.95, 0},
		{secs(7), 0.95, 7 * time.Second},
		{secs(5, 1, 4, 2, 3), 0.95, 5 * time.Second},
		{secs(5, 1, 4, 2, 3), 0.5, 3 * time.Second},
		{secs(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 100), 0.95, 20 * time.Second},
	}
	for _, tc := range cases {
		if got := Percentile(tc.in, tc.q); got != tc.want {
			t.Errorf("Percentile(%v, %g) = %v, want %v", tc.in, tc.q, got, tc.want)
		}
	}
}

func TestStartupTime(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pod := func(conds ...corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}, Status: corev1.PodStatus{Conditions: conds}}
	}
	ready := func(s corev1.ConditionStatus, after time.Duration) corev1.PodCondition {
		return corev1.PodCondition{Type: corev1.PodReady, Status: s, LastTransitionTime: metav1.NewTime(created.Add(after))}
	}
	cases := []struct {
		name string
		pod  *corev1.Pod
		want time.Duration
		ok   bool
	}{
		{"ready", pod(corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, ready(corev1.ConditionTrue, 95*time.Second)), 95 * time.Second, true},
		{"not ready", pod(ready(corev1.ConditionFalse, 10*time.Second)), 0, false},
		{"no condition", pod(), 0, false},
		{"clock skew", pod(ready(corev1.ConditionTrue, -time.Second)), 0, false},
	}
	for _, tc := range cases {
		got, ok := StartupTime(tc.pod)
		if ok != tc.ok || ok && got != tc.want {
			t.Errorf("%s: StartupTime = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestWriteYAML: the output is two documents: the behavior, which parses
// back into the recommended one, and the pod template's drain; every number
// of both has a reason on the line above it.
func TestWriteYAML(t *testing.T) {
	ca := DefaultAutoscaler()
	ca.GPUUtilizationThreshold = 0.1
	r := Recommend(Workload{HPA: "demo/llm", Target: "Deployment/llm", Startup: secs(80, 95, 70), GPUsPerPod: 1, GPUsPerNode: 8,
		TerminationGracePeriod: 900 * time.Second, Current: withStabilization(30),
		Streams: streams(t, map[float64]float64{5: 10, 10: 30, 20: 31}), Container: "vllm"}, ca)
	out, docs := writtenDocs(t, r)
	var got struct {
		Behavior autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior"`
	}
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &got); err != nil {
		t.Fatalf("output is not a behavior: %v\n%s", err, out)
	}
	if !equality.Semantic.DeepEqual(got.Behavior, r.Behavior) {
		t.Errorf("round trip: got %+v, want %+v", got.Behavior, r.Behavior)
	}
	var tmpl corev1.PodTemplateSpec
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &tmpl); err != nil {
		t.Fatalf("second document is not a pod template: %v\n%s", err, docs[1])
	}
	if g := tmpl.Spec.TerminationGracePeriodSeconds; g == nil || *g != 35 || len(tmpl.Spec.Containers) != 1 ||
		tmpl.Spec.Containers[0].Name != "vllm" || tmpl.Spec.Containers[0].Lifecycle.PreStop.Sleep.Seconds != 25 {
		t.Errorf("pod template %+v, want vllm's preStop sleep 25 s (20 s streams + 5 s) and a 35 s grace period", tmpl.Spec)
	}
	// The drain of a server that exits once idle: the sleep covers the
	// endpoint lag, the shutdown timeout the streams, the grace both.
	if w := r.Drain.Wait; w.PreStop != 5*time.Second || w.ShutdownTimeout != 20*time.Second || w.Grace != 35*time.Second {
		t.Errorf("drain with --shutdown-timeout %+v, want a 5 s sleep, 20 s timeout and 35 s grace", w)
	}
	if !strings.Contains(out, "#   and add --shutdown-timeout=20 to the server's args") || !strings.Contains(out, "#   terminationGracePeriodSeconds: 35, preStop sleep seconds: 5") {
		t.Errorf("the output does not give the --shutdown-timeout drain:\n%s", out)
	}
	checkReasons(t, out)
	if n := strings.Count(docs[0], "# WARNING: "); n != 3 {
		t.Errorf("%d warnings in the behavior, want 3 (threshold, grace period, fast scale-down)", n)
	}
	if n := strings.Count(docs[1], "# WARNING: "); n != 0 {
		t.Errorf("%d warnings in the pod template, want none", n)
	}
}

// writtenDocs writes r as YAML and returns it whole and as its two
// documents, the behavior and the pod template.
func writtenDocs(t *testing.T, r Recommendation) (string, []string) {
	t.Helper()
	var buf bytes.Buffer
	if err := r.WriteYAML(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	t.Logf("\n%s", out)
	docs := strings.Split(strings.TrimSuffix(out, "---\n"), "---\n")
	if len(docs) != 2 {
		t.Fatalf("%d documents, want the behavior and the pod template:\n%s", len(docs), out)
	}
	return out, docs
}

// checkReasons fails every line of out that sets a number or a word
// without a comment line above it saying why.
func checkReasons(t *testing.T, out string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		trimmed := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "- "))
		k, v, ok := strings.Cut(trimmed, ": ")
		if !ok || strings.HasPrefix(trimmed, "#") || k == "type" || k == "name" {
			continue
		}
		if i == 0 || !strings.HasPrefix(strings.TrimSpace(lines[i-1]), "# ") {
			t.Errorf("line %d %q (%s=%s) has no reason above it", i+1, l, k, v)
		}
	}
}

// TestWriteYAMLWaitDrain: for a serving container that passes
// --shutdown-timeout, the pod template's patch carries the drain of a
// server that exits once idle (a sleep over the endpoint lag, a grace over
// the sleep, the timeout and the exit), warns when the timeout is shorter
// than the longest stream, and gives the sleep form in a comment.
func TestWriteYAMLWaitDrain(t *testing.T) {
	tests := []struct {
		name          string
		timeout       time.Duration
		wantGrace     int64
		wantWarnings  int
		wantInWarning string
	}{
		{"a timeout over the longest stream", 30 * time.Second, 45, 0, ""},
		{"a timeout of the longest stream", 20 * time.Second, 35, 0, ""},
		{"a timeout shorter than the longest stream", 10 * time.Second, 35, 1, "raise it to 20"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Recommend(Workload{HPA: "demo/llm", Target: "Deployment/llm", Startup: secs(80, 95, 70), GPUsPerPod: 1, GPUsPerNode: 8,
				Streams: streams(t, map[float64]float64{5: 10, 10: 30, 20: 31}), Container: "vllm", ShutdownTimeout: tt.timeout}, DefaultAutoscaler())
			if n := len(r.Drain.Warnings); n != tt.wantWarnings {
				t.Errorf("the recommendation carries %d drain warnings %q, want %d", n, r.Drain.Warnings, tt.wantWarnings)
			}
			_, docs := writtenDocs(t, r)
			var tmpl corev1.PodTemplateSpec
			if err := yaml.UnmarshalStrict([]byte(docs[1]), &tmpl); err != nil {
				t.Fatalf("second document is not a pod template: %v\n%s", err, docs[1])
			}
			if g := tmpl.Spec.TerminationGracePeriodSeconds; g == nil || *g != tt.wantGrace || len(tmpl.Spec.Containers) != 1 ||
				tmpl.Spec.Containers[0].Name != "vllm" || tmpl.Spec.Containers[0].Lifecycle.PreStop.Sleep.Seconds != 5 {
				t.Errorf("pod template %+v, want vllm's 5 s preStop sleep and a %d s grace period\n%s", tmpl.Spec, tt.wantGrace, docs[1])
			}
			if n := strings.Count(docs[1], "# WARNING: "); n != tt.wantWarnings || !strings.Contains(docs[1], tt.wantInWarning) {
				t.Errorf("%d warnings, want %d mentioning %q:\n%s", n, tt.wantWarnings, tt.wantInWarning, docs[1])
			}
			if !strings.Contains(docs[1], "#   terminationGracePeriodSeconds: 35, preStop sleep seconds: 25") {
				t.Errorf("the sleep form is not given for servers without --shutdown-timeout:\n%s", docs[1])
			}
			checkReasons(t, docs[1])
		})
	}
}

// TestCapacityTargetValue: the HPA's target value is the README's 800m.
func TestCapacityTargetValue(t *testing.T) {
	if got := CapacityTargetValue().String(); got != "800m" {
		t.Errorf("CapacityTargetValue = %s, want 800m", got)
	}
}
