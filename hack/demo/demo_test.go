package main

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"

	"github.com/gpuscale/gpuscale/pkg/signal/recommend"
)

// TestDemoRunsTheREADMEsHPA: the demo's HPA scales on what the README's
// recommended HPA scales on, within the same bounds; and for the README's
// start-up, a 60 s model load after 3 s of scheduling (the bench's,
// autoscalebench.Scheduling), `adapter recommend`'s behavior is the
// README's.
func TestDemoRunsTheREADMEsHPA(t *testing.T) {
	readme, err := readmeYAML()
	if err != nil {
		t.Fatal(err)
	}
	demo := readmeHPA()
	if !equality.Semantic.DeepEqual(demo.Spec.Metrics, readme.Spec.Metrics) {
		t.Errorf("demo metrics %+v, README's %+v", demo.Spec.Metrics, readme.Spec.Metrics)
	}
	if *demo.Spec.MinReplicas != *readme.Spec.MinReplicas || demo.Spec.MaxReplicas != readme.Spec.MaxReplicas || demo.Spec.ScaleTargetRef != readme.Spec.ScaleTargetRef {
		t.Errorf("demo bounds or target differ from the README's")
	}
	// The README's HPA reads the capacity signal of a pool without a role:
	// its loop is closed.
	rec := recommend.Recommend(recommend.Workload{Startup: []time.Duration{63 * time.Second}, ClosedLoop: true, GPUsPerPod: 1, GPUsPerNode: 8}, recommend.DefaultAutoscaler())
	if !equality.Semantic.DeepEqual(rec.Behavior, *readme.Spec.Behavior) {
		t.Errorf("adapter recommend for a 63 s start-up gives %+v, the README shows %+v", rec.Behavior, *readme.Spec.Behavior)
	}
}

// TestDemoTable: the rows say what is not known yet instead of a zero,
// and print values with units, not raw quantities.
func TestDemoTable(t *testing.T) {
	var b bytes.Buffer
	tb := newTable(&b)
	tb.rate = 40
	v, ttft, q := 1.25, 0.4123, 3.0
	tb.row(5*time.Second, observation{})
	tb.row(95*time.Second, observation{current: 2, desired: 3, haveReplicas: true, signal: &v, ttftP90: &ttft, queue: &q})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "TTFT p90") {
		t.Fatalf("table:\n%s", b.String())
	}
	if f := strings.Fields(lines[1]); f[0] != "0:05" || strings.Contains(lines[1], "0 -> 0") || strings.Count(lines[1], "-") < 4 {
		t.Errorf("a row before the HPA's first reading: %q", lines[1])
	}
	for _, want := range []string{"1:35", "2 -> 3", "1.25", "0.41 s", "3.0"} {
		if !strings.Contains(lines[2], want) {
			t.Errorf("row %q lacks %q", lines[2], want)
		}
	}
	if strings.Contains(b.String(), "m ") {
		t.Errorf("raw milli-quantities in %q", b.String())
	}
}

// readmeYAML is the README's first HPA example (the recommended one).
func readmeYAML() (*autoscalingv2.HorizontalPodAutoscaler, error) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		return nil, err
	}
	start := bytes.Index(b, []byte("```yaml\napiVersion: autoscaling/v2"))
	if start < 0 {
		return nil, errors.New("README.md has no HPA example")
	}
	block := b[start+len("```yaml\n"):]
	block = block[:bytes.Index(block, []byte("```"))]
	var h autoscalingv2.HorizontalPodAutoscaler
	return &h, yaml.UnmarshalStrict(block, &h)
}

// TestExampleBehaviorIsTheREADMEs: deploy/examples/hpa-capacity.yaml, the
// README's HPA as a file to apply, carries the same behavior, the advice
// of `adapter recommend` for the README's start-up.
func TestExampleBehaviorIsTheREADMEs(t *testing.T) {
	readme, err := readmeYAML()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../../deploy/examples/hpa-capacity.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var example autoscalingv2.HorizontalPodAutoscaler
	if err := yaml.UnmarshalStrict(b, &example); err != nil {
		t.Fatal(err)
	}
	if example.Spec.Behavior == nil || !equality.Semantic.DeepEqual(*example.Spec.Behavior, *readme.Spec.Behavior) {
		t.Errorf("deploy/examples/hpa-capacity.yaml's behavior %+v, the README's %+v", example.Spec.Behavior, *readme.Spec.Behavior)
	}
}
