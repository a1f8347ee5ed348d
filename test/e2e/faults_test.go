package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpuscale/gpuscale/internal/harness/testenv"
)

// TestFaults: broken sources are missing data, never zeros, and one broken
// source never takes the others down.
func TestFaults(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-faults")
	sel := deployment(t, ns, "llm", 2)
	env.World.SetRate(ns, sel, 20)
	base := "/apis/custom.metrics.k8s.io/v1beta2/namespaces/" + ns
	testenv.WaitFor(t, 30*time.Second, "both pods served", func(ctx context.Context) (bool, error) {
		l, err := customList(ctx, base+"/pods/*/inference_queue_depth")
		g, err2 := customList(ctx, base+"/pods/*/gpu_utilization")
		return err == nil && err2 == nil && len(l.Items) == 2 && len(g.Items) == 2, nil
	})
	pods := podsOf(t, ns, sel)

	t.Run("a dead metrics endpoint is a missing pod, not a zero", func(t *testing.T) {
		dead := pods[0].Name
		env.World.StopServing(ns, dead)
		testenv.WaitFor(t, 3*maxStaleness+5*time.Second, "the dead pod to drop out", func(ctx context.Context) (bool, error) {
			l, err := customList(ctx, base+"/pods/*/inference_queue_depth")
			if err != nil || len(l.Items) != 1 {
				return false, nil
			}
			return l.Items[0].DescribedObject.Name != dead, nil
		})
		if _, err := customValue(ctx, base+"/pods/"+dead+"/inference_queue_depth"); err == nil {
			t.Error("the dead pod still has a value")
		}
	})

	t.Run("exporter gone: GPU metrics absent, inference metrics served", func(t *testing.T) {
		live := pods[1]
		env.World.StopExporter(live.Spec.NodeName)
		t.Cleanup(func() { restoreExporter(t, live.Spec.NodeName) })
		testenv.WaitFor(t, 3*maxStaleness+5*time.Second, "GPU metrics to go", func(ctx context.Context) (bool, error) {
			_, err := customValue(ctx, base+"/pods/"+live.Name+"/gpu_utilization")
			return err != nil, nil
		})
		if _, err := customValue(ctx, base+"/pods/"+live.Name+"/inference_queue_depth"); err != nil {
			t.Errorf("inference metrics must survive the exporter: %v", err)
		}
	})

	t.Run("adapter restart: no wrong scaling from stale data", func(t *testing.T) {
		ns := namespace(t, "e2e-restart")
		sel := deployment(t, ns, "llm", 2)
		// Idle servers hold only their weights: 16000 MiB each, exactly
		// the target, so the HPA's one right answer is to stay at 2.
		env.World.SetRate(ns, sel, 0)
		hpa(t, ns, "llm", 1, 6, podsMetric("gpu_memory_used_bytes", "16000Mi"))
		var before int32
		stable := 0
		testenv.WaitFor(t, 90*time.Second, "the HPA to settle", func(ctx context.Context) (bool, error) {
			d, c := replicas(ctx, ns, "llm")
			if d == c && d == before && d > 0 {
				stable++
			} else {
				stable, before = 0, d
			}
			return stable >= int(2*hpaSync/(200*time.Millisecond)), nil
		})
		if err := env.StopAdapter(); err != nil {
			t.Fatal(err)
		}
		// With the API gone the HPA cannot compute anything: it must keep
		// the replicas it has, not scale on a missing value. A sync that
		// finds the metric missing says so (ScalingActive False) in the
		// status it writes last, so the replicas read once it shows are
		// what that sync decided.
		testenv.WaitFor(t, 3*hpaSync+30*time.Second, "the HPA to report the missing metric while the adapter is down", func(ctx context.Context) (bool, error) {
			if d, _ := replicas(ctx, ns, "llm"); d != before {
				return false, fmt.Errorf("HPA changed desired replicas %d -> %d while the adapter was down", before, d)
			}
			for _, c := range getHPA(t, ns, "llm").Status.Conditions {
				if c.Type == autoscalingv2.ScalingActive && c.Status == corev1.ConditionFalse {
					return true, nil
				}
			}
			return false, nil
		})
		if d, _ := replicas(ctx, ns, "llm"); d != before {
			t.Fatalf("HPA changed desired replicas %d -> %d while the adapter was down", before, d)
		}
		if err := env.StartAdapter(ctx); err != nil {
			t.Fatal(err)
		}
		// Recovered: the HPA reads the metric again (a fresh
		// lastScaleTime is not required: the load did not change).
		var last string
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			h, err := env.Cluster.Client().AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, "llm", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			last = fmt.Sprintf("%+v", h.Status.Conditions)
			for _, c := range h.Status.Conditions {
				if c.Type == autoscalingv2.ScalingActive && c.Status == corev1.ConditionTrue && c.Reason == "ValidMetricFound" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("the HPA did not recover after the adapter restart: %v; conditions: %s", err, last)
		}
		if d, _ := replicas(ctx, ns, "llm"); d != before {
			t.Errorf("after the restart desired = %d, want %d (the load did not change)", d, before)
		}
	})
}

// restoreExporter replaces a node's stopped exporter: the DaemonSet makes
// a new pod, which the world serves again.
func restoreExporter(t *testing.T, node string) {
	ctx := context.Background()
	c := env.Cluster.Client().CoreV1().Pods("gpuscale")
	l, err := c.List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=gpuscale-exporter", FieldSelector: "spec.nodeName=" + node})
	if err != nil || len(l.Items) != 1 {
		t.Errorf("exporter pod on %s: %v (%d pods)", node, err, len(l.Items))
		return
	}
	old := l.Items[0].Name
	if err := c.Delete(ctx, old, metav1.DeleteOptions{}); err != nil {
		t.Error(err)
		return
	}
	testenv.WaitFor(t, 60*time.Second, "a new exporter on "+node, func(ctx context.Context) (bool, error) {
		l, err := c.List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=gpuscale-exporter", FieldSelector: "spec.nodeName=" + node})
		if err != nil || len(l.Items) != 1 || l.Items[0].Name == old {
			return false, nil
		}
		for _, cond := range l.Items[0].Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}
