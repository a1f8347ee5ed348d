package autoscalebench

import (
	"slices"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"

	"github.com/gpuscale/gpuscale/internal/harness/localcluster"
)

func TestAutoscalerPutsBehaviorOnTheTraceClock(t *testing.T) {
	targets := Targets{GPUUtilization: 70, QueueDepth: 1.5, TTFT: time.Second, ModelLoad: time.Minute}
	for _, tc := range []struct {
		policy, metric     string
		metricType         autoscalingv2.MetricSourceType
		downWindow         int32
		downValue, upValue int32 // first scale-down and scale-up policy values
		downPeriod         int32
	}{
		// The controller's defaults at 6x: 300 s -> 50 s, 15 s -> 3 s.
		{PolicyGPUUtilization, "gpu_utilization", autoscalingv2.PodsMetricSourceType, 50, 100, 100, 3},
		{PolicyQueueDepth, "inference_queue_depth", autoscalingv2.PodsMetricSourceType, 50, 100, 100, 3},
		{PolicyTTFT, "inference_ttft_seconds_p90", autoscalingv2.ObjectMetricSourceType, 50, 100, 100, 3},
		// `adapter recommend` for a 60 s load: a 60 s window and one
		// replica per 60 s, at 6x: 10 s.
		{PolicyQueueDepthRecommended, "inference_queue_depth", autoscalingv2.PodsMetricSourceType, 10, 1, 100, 10},
		// The capacity signal's closed loop: the window, then the 60 s
		// stabilization window, 120 s, at 6x: 20 s.
		{PolicyCapacity, "inference_capacity_utilization", autoscalingv2.ObjectMetricSourceType, 10, 1, 100, 20},
		{PolicyRunningRequests, "inference_requests_running", autoscalingv2.PodsMetricSourceType, 50, 100, 100, 3},
	} {
		h, err := autoscaler(tc.policy, "ns", targets, 1, 18, 6)
		if err != nil {
			t.Fatal(err)
		}
		m := h.Spec.Metrics[0]
		name := ""
		switch m.Type {
		case autoscalingv2.PodsMetricSourceType:
			name = m.Pods.Metric.Name
		case autoscalingv2.ObjectMetricSourceType:
			name = m.Object.Metric.Name
		}
		if m.Type != tc.metricType || name != tc.metric {
			t.Errorf("%s: metric %s %s, want %s %s", tc.policy, m.Type, name, tc.metricType, tc.metric)
		}
		b := h.Spec.Behavior
		if got := *b.ScaleDown.StabilizationWindowSeconds; got != tc.downWindow {
			t.Errorf("%s: scale-down window %ds, want %ds", tc.policy, got, tc.downWindow)
		}
		if d := b.ScaleDown.Policies[0]; d.Value != tc.downValue || d.PeriodSeconds != tc.downPeriod {
			t.Errorf("%s: scale-down policy %+v, want value %d per %ds", tc.policy, d, tc.downValue, tc.downPeriod)
		}
		if u := b.ScaleUp.Policies[0]; u.Value != tc.upValue || u.PeriodSeconds != 3 {
			t.Errorf("%s: scale-up policy %+v, want value %d per 3s", tc.policy, u, tc.upValue)
		}
		if *h.Spec.MinReplicas != 1 || h.Spec.MaxReplicas != 18 {
			t.Errorf("%s: replicas %d-%d, want 1-18", tc.policy, *h.Spec.MinReplicas, h.Spec.MaxReplicas)
		}
	}
	if q := mustAutoscaler(t, PolicyQueueDepth, targets).Spec.Metrics[0].Pods.Target.AverageValue; q.MilliValue() != 1500 {
		t.Errorf("queue target %v, want 1.5", q)
	}
	if _, err := autoscaler(PolicyStatic, "ns", targets, 1, 18, 6); err == nil {
		t.Error("the static policy got an HPA")
	}
}

func mustAutoscaler(t *testing.T, policy string, targets Targets) *autoscalingv2.HorizontalPodAutoscaler {
	t.Helper()
	h, err := autoscaler(policy, "ns", targets, 1, 18, 6)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestWorkloadLoadsItsModel(t *testing.T) {
	d := workload("ns", "l4-llama-3.1-8b", 3, 10*time.Second, nil)
	if got := d.Spec.Template.Annotations[localcluster.ReadyAfterAnnotation]; got != "10s" {
		t.Errorf("ready-after annotation %q, want 10s (the compressed model load)", got)
	}
	if *d.Spec.Replicas != 3 {
		t.Errorf("replicas %d, want 3", *d.Spec.Replicas)
	}
	env := map[string]string{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env["SIM_PROFILE"] != "l4-llama-3.1-8b" {
		t.Errorf("SIM_PROFILE %q", env["SIM_PROFILE"])
	}
}

func TestLLMDLaw(t *testing.T) {
	var l LLMDLaw
	// Saturated at twice the SLO (clamped to 2): 4 ready replicas at
	// s = 2 need ceil(4 x 2 / 0.55) = 15.
	if got := l.Step(0, 3, 4, 4, 1, 18); got != 15 {
		t.Errorf("first step = %d, want 15", got)
	}
	// The 11 new replicas are warming: the mean over 45 s is still 2, and
	// they are credited, so nothing more is asked for.
	if got := l.Step(15*time.Second, 2, 15, 4, 1, 18); got != 15 {
		t.Errorf("while warming = %d, want 15", got)
	}
	// Between the thresholds nothing changes.
	var m LLMDLaw
	if got := m.Step(0, 0.5, 6, 6, 1, 18); got != 6 {
		t.Errorf("in band = %d, want 6", got)
	}
	// Below 0.40 with nothing warming, it shrinks, but no further than
	// the window's highest recommendation (6, from 15 s before).
	if got := m.Step(15*time.Second, 0.1, 6, 6, 1, 18); got != 6 {
		t.Errorf("inside the stabilization window = %d, want 6", got)
	}
	// After the window, idle (0) averaged over 45 s shrinks to the minimum.
	for at := 30 * time.Second; at <= 400*time.Second; at += 15 * time.Second {
		m.Step(at, 0, 6, 6, 1, 18)
	}
	if got := m.Step(415*time.Second, 0, 6, 6, 1, 18); got != 1 {
		t.Errorf("idle after the window = %d, want 1", got)
	}
}

func TestResolve(t *testing.T) {
	for name, want := range map[string]string{
		PolicyRecommended: Recommended, PolicyCapacity: PolicyCapacity, PolicyQueueDepth: PolicyQueueDepth,
		PolicyRecommended + AbortSuffix: Recommended + AbortSuffix, PolicyQueueDepth + AbortSuffix: PolicyQueueDepth + AbortSuffix,
	} {
		if got := Resolve(name); got != want {
			t.Errorf("Resolve(%q) = %q, want %q", name, got, want)
		}
	}
	if !slices.Contains(Policies, Recommended) {
		t.Errorf("the recommended policy %q is not one the bench runs", Recommended)
	}
}
