package app

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/scaledown"
	"github.com/gpuscale/gpuscale/pkg/signal/recommend"
)

func recommendFixture() []runtime.Object {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	grace := int64(900)
	tmpl := func(app string, managed bool) corev1.PodTemplateSpec {
		l := map[string]string{"app": app}
		if managed {
			l[scaledown.ManagedLabel] = scaledown.ManagedValue
		}
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "vllm", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{scaledown.DefaultGPUResource: resource.MustParse("2")}}}},
		}}
	}
	deploy := func(name string, managed bool) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo"}, Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}, Template: tmpl(name, managed)}}
	}
	hpa := func(name, kind string) *autoscalingv2.HorizontalPodAutoscaler {
		return &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo"},
			Spec: autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{Kind: kind, Name: name},
				Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{
					DescribedObject: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: kind, Name: name},
					Metric:          autoscalingv2.MetricIdentifier{Name: provider.CapacityUtilization}}}}}}
	}
	pod := func(name, app, node string, ready time.Duration) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo", Labels: map[string]string{"app": app},
			CreationTimestamp: metav1.NewTime(created)}, Spec: corev1.PodSpec{NodeName: node}}
		if ready > 0 {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(created.Add(ready))}}
		}
		return p
	}
	node := func(name string, gpus int64) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{scaledown.DefaultGPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}}}
	}
	return []runtime.Object{
		deploy("llm", true), hpa("llm", "Deployment"),
		deploy("plain", false), hpa("plain", "Deployment"),
		hpa("custom", "Rollout"), // a kind recommend cannot read: skipped
		pod("llm-1", "llm", "gpu-a", 80*time.Second), pod("llm-2", "llm", "gpu-a", 100*time.Second), pod("llm-3", "llm", "gpu-a", 0),
		pod("plain-1", "plain", "gpu-b", 10*time.Second),
		node("gpu-a", 8), node("gpu-b", 16), node("cpu", 0),
	}
}

func TestGatherWorkloads(t *testing.T) {
	client := fake.NewClientset(recommendFixture()...)
	ws, err := gatherWorkloads(context.Background(), client, RecommendOptions{Autoscaler: recommend.DefaultAutoscaler()})
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 {
		t.Fatalf("workloads = %+v, want only the managed one", ws)
	}
	w := ws[0]
	if w.HPA != "demo/llm" || w.Target != "Deployment/llm" || w.GPUsPerPod != 2 || w.GPUsPerNode != 8 ||
		w.TerminationGracePeriod != 900*time.Second || len(w.Startup) != 2 || recommend.Percentile(w.Startup, 0.95) != 100*time.Second {
		t.Errorf("workload = %+v", w)
	}
	if w.SignalWindow != 0 {
		t.Errorf("signal window %v without --ttft-window, want 0 (recommend's default)", w.SignalWindow)
	}
	var flags RecommendOptions
	fs := pflag.NewFlagSet("recommend", pflag.ContinueOnError)
	flags.AddFlags(fs)
	if flags.TTFTWindow != NewOptions().TTFTWindow || NewOptions().TTFTWindow != recommend.DefaultSignalWindow {
		t.Errorf("--ttft-window defaults to %v, the adapter's is %v, recommend's %v: want one value",
			flags.TTFTWindow, NewOptions().TTFTWindow, recommend.DefaultSignalWindow)
	}
	ws, _ = gatherWorkloads(context.Background(), client, RecommendOptions{GPUsPerNode: 4, TTFTWindow: 2 * time.Minute})
	if ws[0].GPUsPerNode != 4 {
		t.Errorf("--gpus-per-node ignored: %d", ws[0].GPUsPerNode)
	}
	if ws[0].SignalWindow != 2*time.Minute {
		t.Errorf("signal window %v with --ttft-window=2m", ws[0].SignalWindow)
	}
	if !w.ClosedLoop {
		t.Error("an HPA on the capacity signal of a pool without a role reads as open-loop; the adapter closes its loop")
	}
}

// TestClosedLoop: recommend paces removals by the capacity signal's closed
// loop only where the adapter closes it: the signal of a pool without a
// role, read as an Object, Pods or External metric.
func TestClosedLoop(t *testing.T) {
	metric := func(name string) autoscalingv2.MetricIdentifier { return autoscalingv2.MetricIdentifier{Name: name} }
	object := autoscalingv2.MetricSpec{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{Metric: metric(provider.CapacityUtilization)}}
	pods := autoscalingv2.MetricSpec{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{Metric: metric(provider.CapacityUtilization)}}
	external := func(sel *metav1.LabelSelector) autoscalingv2.MetricSpec {
		id := metric(provider.CapacityUtilization)
		id.Selector = sel
		return autoscalingv2.MetricSpec{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{Metric: id}}
	}
	queue := autoscalingv2.MetricSpec{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{Metric: metric("inference_queue_depth")}}
	model := map[string]string{provider.ModelLabel: "llama"}
	for _, tc := range []struct {
		name    string
		metrics []autoscalingv2.MetricSpec
		labels  map[string]string
		want    bool
	}{
		{"Object, no role", []autoscalingv2.MetricSpec{object}, nil, true},
		{"Pods, no role", []autoscalingv2.MetricSpec{pods}, nil, true},
		{"External per model", []autoscalingv2.MetricSpec{external(&metav1.LabelSelector{MatchLabels: model})}, nil, true},
		{"queue depth, then capacity", []autoscalingv2.MetricSpec{queue, object}, nil, true},
		{"queue depth alone: no loop", []autoscalingv2.MetricSpec{queue}, nil, false},
		{"no metrics", nil, nil, false},
		{"a prefill pool (gpuscale.io/role)", []autoscalingv2.MetricSpec{object}, map[string]string{provider.RolePodLabel: "prefill"}, false},
		{"a decode pool (llm-d's label)", []autoscalingv2.MetricSpec{object}, map[string]string{"llm-d.ai/role": "decode"}, false},
		{"a role label that names no role", []autoscalingv2.MetricSpec{object}, map[string]string{provider.RolePodLabel: "both"}, true},
		{"External per model and role", []autoscalingv2.MetricSpec{external(&metav1.LabelSelector{MatchLabels: map[string]string{provider.ModelLabel: "llama", provider.RoleLabel: "decode"}})}, nil, false},
		{"External, role as an expression", []autoscalingv2.MetricSpec{external(&metav1.LabelSelector{MatchLabels: model,
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: provider.RoleLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{"prefill"}}}})}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &autoscalingv2.HorizontalPodAutoscaler{Spec: autoscalingv2.HorizontalPodAutoscalerSpec{Metrics: tc.metrics}}
			tmpl := &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: tc.labels}}
			if got := closedLoop(h, tmpl); got != tc.want {
				t.Errorf("closedLoop = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWriteRecommendations(t *testing.T) {
	var out bytes.Buffer
	o := RecommendOptions{Namespace: "demo", Autoscaler: recommend.DefaultAutoscaler()}
	if err := writeRecommendations(context.Background(), fake.NewClientset(recommendFixture()...), o, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# HPA demo/llm -> Deployment/llm", "stabilizationWindowSeconds: 105", "periodSeconds: 165", "# WARNING: terminationGracePeriodSeconds 900"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := writeRecommendations(context.Background(), fake.NewClientset(), o, &out); err != nil || !strings.Contains(out.String(), "no HPA") {
		t.Errorf("empty cluster: %v, %q", err, out.String())
	}
}

// TestRecommendStreams: recommend reads the request-duration histograms of
// the target's scraped pods, merges them, and prints a preStop sleep and
// grace period that cover the longest stream; a pod it cannot read is
// named in a warning, not fatal.
func TestRecommendStreams(t *testing.T) {
	objs := recommendFixture()
	for _, o := range objs {
		switch v := o.(type) {
		case *appsv1.Deployment:
			v.Spec.Template.Annotations = map[string]string{"gpuscale.io/scrape": "true", "gpuscale.io/port": "8000"}
			v.Spec.Template.Spec.Containers = append([]corev1.Container{{Name: "proxy"}}, v.Spec.Template.Spec.Containers...)
			v.Spec.Template.Spec.Containers[1].Ports = []corev1.ContainerPort{{ContainerPort: 8000}}
		case *corev1.Pod:
			v.Annotations = map[string]string{"gpuscale.io/scrape": "true", "gpuscale.io/port": "8000"}
			v.Status.PodIP, v.Status.Phase = "10.0.0.1", corev1.PodRunning
		}
	}
	exp := func(longest string, n int) []byte {
		return []byte(`# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="5.0"} ` + strconv.Itoa(n-1) + `
vllm:e2e_request_latency_seconds_bucket{le="` + longest + `"} ` + strconv.Itoa(n) + `
vllm:e2e_request_latency_seconds_bucket{le="+Inf"} ` + strconv.Itoa(n) + `
vllm:e2e_request_latency_seconds_sum 10
vllm:e2e_request_latency_seconds_count ` + strconv.Itoa(n) + `
`)
	}
	var asked []string
	read := func(_ context.Context, p *corev1.Pod, u string) ([]byte, error) {
		asked = append(asked, p.Name+" "+u)
		switch p.Name {
		case "llm-1":
			return exp("10.0", 4), nil
		case "llm-2":
			return exp("40.0", 6), nil
		}
		return nil, errors.New("connection refused")
	}
	o := RecommendOptions{Namespace: "demo", Autoscaler: recommend.DefaultAutoscaler(), read: read}
	ws, err := gatherWorkloads(context.Background(), fake.NewClientset(objs...), o)
	if err != nil {
		t.Fatal(err)
	}
	w := ws[0]
	longest, n, _ := recommend.LongestStream(w.Streams)
	if longest != 40*time.Second || n != 10 || w.Container != "vllm" || len(w.StreamErrors) != 1 || !strings.Contains(w.StreamErrors[0], "llm-3") {
		t.Errorf("longest %v over %v streams, container %q, errors %q; want 40s over 10, vllm, llm-3 unreadable (asked %q)",
			longest, n, w.Container, w.StreamErrors, asked)
	}
	var out bytes.Buffer
	if err := writeRecommendations(context.Background(), fake.NewClientset(objs...), o, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"terminationGracePeriodSeconds: 55", "- name: vllm", "seconds: 45", "# WARNING: stream lengths: pod demo/llm-3"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	// A server that passes --shutdown-timeout exits once idle: the patch
	// sleeps over the endpoint lag only, and its grace covers the longer
	// of the timeout and the longest stream.
	for _, obj := range objs {
		if d, ok := obj.(*appsv1.Deployment); ok {
			d.Spec.Template.Spec.Containers[1].Args = []string{"--model=m", "--shutdown-timeout=60"}
		}
	}
	out.Reset()
	if err := writeRecommendations(context.Background(), fake.NewClientset(objs...), o, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"terminationGracePeriodSeconds: 75", "- name: vllm", "seconds: 5\n", "--shutdown-timeout=60"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("with --shutdown-timeout, output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestShutdownTimeoutOf: the serving container's --shutdown-timeout, as
// vLLM's argument parser reads it, wherever the template passes it.
func TestShutdownTimeoutOf(t *testing.T) {
	tests := []struct {
		name          string
		command, args []string
		container     string
		want          time.Duration
	}{
		{"none", nil, []string{"--model=m", "--port=8000"}, "vllm", 0},
		{"one word", nil, []string{"--model=m", "--shutdown-timeout=120"}, "vllm", 120 * time.Second},
		{"two words", []string{"vllm", "serve"}, []string{"m", "--shutdown-timeout", "90"}, "vllm", 90 * time.Second},
		{"underscores", nil, []string{"--shutdown_timeout=30"}, "vllm", 30 * time.Second},
		{"inside a shell command line", []string{"/bin/sh", "-c"}, []string{"exec vllm serve m --shutdown-timeout=60 --port 8000"}, "vllm", time.Minute},
		{"the last one given", nil, []string{"--shutdown-timeout=60", "--shutdown-timeout=0"}, "vllm", 0},
		{"zero: abort at once", nil, []string{"--shutdown-timeout=0"}, "vllm", 0},
		{"not a number", nil, []string{"--shutdown-timeout=2m"}, "vllm", 0},
		{"no value", nil, []string{"--shutdown-timeout"}, "vllm", 0},
		{"another container's (the args are vllm's)", nil, []string{"--shutdown-timeout=120"}, "proxy", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
				{Name: "proxy"}, {Name: "vllm", Command: tt.command, Args: tt.args}}}}
			if got := shutdownTimeoutOf(tmpl, tt.container); got != tt.want {
				t.Errorf("shutdownTimeoutOf(%q %q, %s) = %v, want %v", tt.command, tt.args, tt.container, got, tt.want)
			}
		})
	}
}
