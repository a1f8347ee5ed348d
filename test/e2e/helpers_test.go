package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	cmv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
	emv1beta1 "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/gpuscale/gpuscale/internal/harness/devenv"
	"github.com/gpuscale/gpuscale/internal/harness/testenv"
)

// namespace creates a fresh namespace for one test and deletes it after.
func namespace(t *testing.T, name string) string {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := env.Cluster.Client().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logNamespaceState(t, name)
		}
		env.World.SetRate(name, labels.Everything(), 0)
		_ = env.Cluster.Client().CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// logNamespaceState logs what a failed test's HPAs, Deployments and pods
// were at its end: the wait that timed out says what it wanted, this says
// what the cluster had instead.
func logNamespaceState(t *testing.T, ns string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := env.Cluster.Client()
	if hpas, err := c.AutoscalingV2().HorizontalPodAutoscalers(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, h := range hpas.Items {
			metrics, _ := json.Marshal(h.Status.CurrentMetrics)
			t.Logf("at the end: HPA %s/%s current %d desired %d, metrics %s", ns, h.Name, h.Status.CurrentReplicas, h.Status.DesiredReplicas, metrics)
			for _, cond := range h.Status.Conditions {
				t.Logf("at the end: HPA %s/%s %s=%s %s: %s", ns, h.Name, cond.Type, cond.Status, cond.Reason, cond.Message)
			}
		}
	}
	if deps, err := c.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, d := range deps.Items {
			t.Logf("at the end: Deployment %s/%s spec %d, ready %d", ns, d.Name, ptr.Deref(d.Spec.Replicas, 0), d.Status.ReadyReplicas)
		}
	}
	if pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			t.Logf("at the end: pod %s/%s on %q %s, deleting %v", ns, p.Name, p.Spec.NodeName, p.Status.Phase, p.DeletionTimestamp != nil)
		}
	}
}

// deployment creates a Deployment of simulated vLLM servers, one GPU each,
// annotated for scraping, and waits for its replicas to be Ready.
func deployment(t *testing.T, ns, name string, replicas int32) labels.Selector {
	t.Helper()
	d := devenv.InferenceDeployment(ns, name, replicas, nil)
	if _, err := env.Cluster.Client().AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sel := labels.SelectorFromSet(d.Spec.Selector.MatchLabels)
	testenv.WaitFor(t, 60*time.Second, fmt.Sprintf("%d ready replicas of %s/%s", replicas, ns, name), func(ctx context.Context) (bool, error) {
		got, err := env.Cluster.Client().AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && got.Status.ReadyReplicas == replicas, nil
	})
	return sel
}

func hpa(t *testing.T, ns, name string, minR, maxR int32, m autoscalingv2.MetricSpec) {
	t.Helper()
	zero := int32(0)
	h := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
			MinReplicas:    &minR, MaxReplicas: maxR,
			Metrics: []autoscalingv2.MetricSpec{m},
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
				ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: &zero},
				ScaleUp:   &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: &zero},
			},
		},
	}
	if _, err := env.Cluster.Client().AutoscalingV2().HorizontalPodAutoscalers(ns).Create(context.Background(), h, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func getHPA(t *testing.T, ns, name string) *autoscalingv2.HorizontalPodAutoscaler {
	t.Helper()
	h, err := env.Cluster.Client().AutoscalingV2().HorizontalPodAutoscalers(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// metricRequests is the adapter's counter of the metrics API requests it
// answered, by api, metric, resource and result.
const metricRequests = "gpuscale_adapter_metric_requests_total"

// awaitAdapterReads waits until the adapter has answered n more metrics
// API requests matching labels (of metricRequests) than it had when
// called: n more syncs of an HPA that reads such a metric, so that a test
// judges what the HPA did on them, not on a fixed time. Another HPA that
// reads the same metric shortens the wait: keep n above one.
func awaitAdapterReads(t *testing.T, n int, labels map[string]string) {
	t.Helper()
	start, err := env.AdapterCounter(context.Background(), metricRequests, labels)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Duration(n)*hpaSync+30*time.Second, fmt.Sprintf("%d more adapter requests %v", n, labels), func(ctx context.Context) (bool, error) {
		c, err := env.AdapterCounter(ctx, metricRequests, labels)
		return err == nil && c >= start+float64(n), nil
	})
}

// raw GETs a path through the kube-apiserver, as `kubectl get --raw` does.
func raw(ctx context.Context, path string) ([]byte, error) {
	return env.Cluster.Client().Discovery().RESTClient().Get().RequestURI(path).DoRaw(ctx)
}

func customList(ctx context.Context, path string) (*cmv1beta2.MetricValueList, error) {
	b, err := raw(ctx, path)
	if err != nil {
		return nil, err
	}
	var l cmv1beta2.MetricValueList
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	return &l, nil
}

func customValue(ctx context.Context, path string) (*cmv1beta2.MetricValue, error) {
	b, err := raw(ctx, path)
	if err != nil {
		return nil, err
	}
	// A single object is answered as a one-item list.
	var l cmv1beta2.MetricValueList
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, err
	}
	if len(l.Items) != 1 {
		return nil, fmt.Errorf("%s: %d items, want 1", path, len(l.Items))
	}
	return &l.Items[0], nil
}

func externalList(ctx context.Context, path string) (*emv1beta1.ExternalMetricValueList, error) {
	b, err := raw(ctx, path)
	if err != nil {
		return nil, err
	}
	var l emv1beta1.ExternalMetricValueList
	return &l, json.Unmarshal(b, &l)
}

func podsOf(t *testing.T, ns string, sel labels.Selector) []corev1.Pod {
	t.Helper()
	l, err := env.Cluster.Client().CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func milli(q resource.Quantity) float64 { return float64(q.MilliValue()) / 1000 }
