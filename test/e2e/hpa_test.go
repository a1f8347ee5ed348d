package e2e

import (
	"context"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscale/gpuscale/internal/harness/testenv"
)

func podsMetric(name, average string) autoscalingv2.MetricSpec {
	q := resource.MustParse(average)
	return autoscalingv2.MetricSpec{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
		Metric: autoscalingv2.MetricIdentifier{Name: name},
		Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: &q},
	}}
}

func replicas(ctx context.Context, ns, name string) (desired, current int32) {
	h, err := env.Cluster.Client().AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0, 0
	}
	return h.Status.DesiredReplicas, h.Status.CurrentReplicas
}

// TestHPAQueueDepth: an HPA on inference_queue_depth (averageValue 5)
// scales 1 -> at least 3 after a load step and back to 1 when it stops.
// It also measures the latencies docs/performance.md reports.
func TestHPAQueueDepth(t *testing.T) {
	needEnv(t)
	ns := namespace(t, "e2e-queue")
	sel := deployment(t, ns, "llm", 1)
	hpa(t, ns, "llm", 1, 4, podsMetric("inference_queue_depth", "5"))
	path := "/apis/custom.metrics.k8s.io/v1beta2/namespaces/" + ns + "/pods/*/inference_queue_depth"
	testenv.WaitFor(t, 30*time.Second, "the idle queue to be served", func(ctx context.Context) (bool, error) {
		l, err := customList(ctx, path)
		return err == nil && len(l.Items) == 1, nil
	})

	step := time.Now()
	env.World.SetRate(ns, sel, 45) // about three replicas' capacity
	toValue := testenv.WaitFor(t, 30*time.Second, "the queue to show in the API", func(ctx context.Context) (bool, error) {
		l, err := customList(ctx, path)
		return err == nil && len(l.Items) > 0 && milli(l.Items[0].Value) > 5, nil
	})
	testenv.WaitFor(t, 60*time.Second, "desired replicas > 1", func(ctx context.Context) (bool, error) {
		d, _ := replicas(ctx, ns, "llm")
		return d > 1, nil
	})
	toDesired := time.Since(step)
	testenv.WaitFor(t, 90*time.Second, "at least 3 replicas", func(ctx context.Context) (bool, error) {
		_, c := replicas(ctx, ns, "llm")
		return c >= 3, nil
	})
	t.Logf("FIGURE load step -> value in the API: %v; load step -> HPA desired > 1: %v; value -> desired: %v (scrape %v, HPA sync %v)",
		toValue.Round(10*time.Millisecond), toDesired.Round(10*time.Millisecond), (toDesired - toValue).Round(10*time.Millisecond), scrapeInterval, hpaSync)

	env.World.SetRate(ns, sel, 0)
	testenv.WaitFor(t, 120*time.Second, "scale back to 1 after the load stops", func(ctx context.Context) (bool, error) {
		_, c := replicas(ctx, ns, "llm")
		return c == 1, nil
	})
}

// TestHPAGPUUtilization: the common GPU-utilization HPA (averageValue 70)
// scales up when the simulated GPUs run hot.
func TestHPAGPUUtilization(t *testing.T) {
	needEnv(t)
	ns := namespace(t, "e2e-gpu")
	sel := deployment(t, ns, "llm", 1)
	hpa(t, ns, "llm", 1, 3, podsMetric("gpu_utilization", "70"))
	testenv.WaitFor(t, 30*time.Second, "the HPA to read GPU utilization", func(ctx context.Context) (bool, error) {
		h := getHPA(t, ns, "llm")
		return len(h.Status.CurrentMetrics) > 0 && h.Status.DesiredReplicas > 0, nil
	})
	if d, _ := replicas(context.Background(), ns, "llm"); d != 1 {
		t.Fatalf("idle GPUs: desired %d, want 1", d)
	}
	env.World.SetRate(ns, sel, 14) // one replica is busy almost all the time
	testenv.WaitFor(t, 60*time.Second, "scale-up on hot GPUs", func(ctx context.Context) (bool, error) {
		_, c := replicas(ctx, ns, "llm")
		return c >= 2, nil
	})
}

// TestHPATTFTObject: an HPA on the Deployment's inference_ttft_seconds_p90
// Object metric scales up when TTFT crosses the target.
func TestHPATTFTObject(t *testing.T) {
	needEnv(t)
	ns := namespace(t, "e2e-ttft")
	sel := deployment(t, ns, "llm", 1)
	target := resource.MustParse("1") // one second
	hpa(t, ns, "llm", 1, 3, autoscalingv2.MetricSpec{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{
		DescribedObject: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "llm"},
		Metric:          autoscalingv2.MetricIdentifier{Name: "inference_ttft_seconds_p90"},
		Target:          autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: &target},
	}})
	env.World.SetRate(ns, sel, 5) // well within capacity: TTFT is the prefill time
	path := "/apis/custom.metrics.k8s.io/v1beta2/namespaces/" + ns + "/deployments.apps/llm/inference_ttft_seconds_p90"
	testenv.WaitFor(t, 40*time.Second, "a low TTFT p90", func(ctx context.Context) (bool, error) {
		v, err := customValue(ctx, path)
		return err == nil && milli(v.Value) < 1, nil
	})
	if _, c := replicas(context.Background(), ns, "llm"); c != 1 {
		t.Fatalf("TTFT under target: %d replicas, want 1", c)
	}
	env.World.SetRate(ns, sel, 30) // twice one replica's capacity: the queue makes TTFT grow
	testenv.WaitFor(t, 60*time.Second, "TTFT p90 above the target", func(ctx context.Context) (bool, error) {
		v, err := customValue(ctx, path)
		return err == nil && milli(v.Value) > 1, nil
	})
	testenv.WaitFor(t, 60*time.Second, "scale-up on TTFT", func(ctx context.Context) (bool, error) {
		_, c := replicas(ctx, ns, "llm")
		return c >= 2, nil
	})
}
