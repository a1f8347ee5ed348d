package e2e

import (
	"context"
	"net/url"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpuscale/gpuscale/internal/harness/devenv"
	"github.com/gpuscale/gpuscale/internal/harness/localcluster"
	"github.com/gpuscale/gpuscale/internal/harness/simworld"
	"github.com/gpuscale/gpuscale/internal/harness/testenv"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

// modelLoad is how long a woken replica takes to become Ready, as a model
// server loading its weights does (kwok's ready-after stage).
const modelLoad = 2 * time.Second

// wakeScenario is a model behind a router, with an HPA at minReplicas 0
// on metric, which scales its one idle replica to zero: Kubernetes wakes
// only a workload its HPA scaled to zero (the ScaledToZero condition), not
// one scaled there by hand. It returns the router, once the model is at
// zero.
func wakeScenario(t *testing.T, ns string, metric autoscalingv2.MetricSpec) *simworld.Router {
	t.Helper()
	ctx := context.Background()
	client := env.Cluster.Client()
	d := devenv.InferenceDeployment(ns, "llm", 1, nil)
	d.Spec.Template.Annotations[localcluster.ReadyAfterAnnotation] = modelLoad.String()
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, devenv.RouterPod(ns, "epp", d.Spec.Selector.MatchLabels, "model-llm"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var router *simworld.Router
	testenv.WaitFor(t, 30*time.Second, "the router to run", func(context.Context) (bool, error) {
		router = env.World.Router(ns, "epp")
		return router != nil, nil
	})
	testenv.WaitFor(t, 30*time.Second, "one ready replica", func(ctx context.Context) (bool, error) {
		got, err := client.AppsV1().Deployments(ns).Get(ctx, "llm", metav1.GetOptions{})
		return err == nil && got.Status.ReadyReplicas == 1, nil
	})
	hpa(t, ns, "llm", 0, 2, metric)
	testenv.WaitFor(t, 60*time.Second, "the HPA to scale the idle model to zero", func(ctx context.Context) (bool, error) {
		got, err := client.AppsV1().Deployments(ns).Get(ctx, "llm", metav1.GetOptions{})
		return err == nil && *got.Spec.Replicas == 0 && got.Status.Replicas == 0, nil
	})
	return router
}

// scaledToZero reports whether the HPA says it scaled its target to zero,
// which is what lets it scale the target up again.
func scaledToZero(s autoscalingv2.HorizontalPodAutoscalerStatus) bool {
	for _, c := range s.Conditions {
		if c.Type == autoscalingv2.ScaledToZero {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// externalQueue is the per-model External metric in a namespace, as the
// HPA asks for it.
func externalQueue(ns, model string) string {
	return "/apis/external.metrics.k8s.io/v1beta1/namespaces/" + ns + "/inference_queue_depth?labelSelector=" +
		url.QueryEscape("model_name="+model)
}

// TestWakeFromZeroHPA: a model at zero replicas, with an HPA at
// minReplicas 0 on the per-model External inference_queue_depth, stays at
// zero while the router in front of it holds nothing (the metric is 0,
// not NotFound), wakes when a first request reaches the router, and every
// request the router held is forwarded and answered, none lost or refused.
func TestWakeFromZeroHPA(t *testing.T) {
	needEnv(t)
	ns := namespace(t, "e2e-wake")
	one := resource.MustParse("1")
	router := wakeScenario(t, ns, autoscalingv2.MetricSpec{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
		Metric: autoscalingv2.MetricIdentifier{Name: "inference_queue_depth",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"model_name": "model-llm"}}},
		Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: &one},
	}})
	testenv.WaitFor(t, 30*time.Second, "the idle router's zero in the External API", func(ctx context.Context) (bool, error) {
		l, err := externalList(ctx, externalQueue(ns, "model-llm"))
		return err == nil && len(l.Items) == 1 && l.Items[0].Value.IsZero(), nil
	})
	wake(t, ns, router, "hpa", map[string]string{"api": "external", "metric": "inference_queue_depth", "resource": "namespaces"})
}

// TestWakeFromZeroHPAObject: the same through the Deployment's Object
// metric, whose selector names the model: with no Ready pod it is the
// model's queue over the namespace, the router's held requests.
func TestWakeFromZeroHPAObject(t *testing.T) {
	needEnv(t)
	ns := namespace(t, "e2e-wake-object")
	one := resource.MustParse("1")
	router := wakeScenario(t, ns, autoscalingv2.MetricSpec{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{
		DescribedObject: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "llm"},
		Metric: autoscalingv2.MetricIdentifier{Name: "inference_queue_depth",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"model_name": "model-llm"}}},
		Target: autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: &one},
	}})
	wake(t, ns, router, "hpa object", map[string]string{"api": "custom", "metric": "inference_queue_depth", "resource": "deployments.apps"})
}

// wake checks that the HPA holds the model at zero on its metric (reads,
// the adapter's request counter labels of it), sends the first requests
// to the router, measures the time to the first token and checks that
// every held request is answered and none refused; then the idle model
// goes back to zero.
func wake(t *testing.T, ns string, router *simworld.Router, figure string, reads map[string]string) {
	t.Helper()
	ctx := context.Background()
	var status autoscalingv2.HorizontalPodAutoscalerStatus
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		status = getHPA(t, ns, "llm").Status
		return scaledToZero(status) && len(status.CurrentMetrics) == 1, nil
	}); err != nil {
		t.Fatalf("the HPA does not hold the model at zero on its metric: status %+v", status)
	}
	// Held at zero over three syncs that read the metric: nothing
	// scaled it up.
	awaitAdapterReads(t, 3, reads)
	if d, _ := replicas(ctx, ns, "llm"); d != 0 {
		t.Fatalf("idle model: desired %d replicas, want 0", d)
	}

	firstToken := make(chan time.Time, 1)
	sent := time.Now()
	timeline := watchWake(t, ns, sent)
	if err := router.Send(inferencesim.Request{ContextTokens: 400, GeneratedTokens: 8}, func(time.Duration) {
		firstToken <- time.Now()
	}); err != nil {
		t.Fatal(err)
	}
	// A few more while the model loads: they too must all be answered.
	for range 3 {
		if err := router.Send(inferencesim.DefaultRequest, nil); err != nil {
			t.Fatal(err)
		}
	}
	var woke time.Duration
	select {
	case at := <-firstToken:
		woke = at.Sub(sent)
	case <-time.After(60 * time.Second):
		t.Fatalf("no first token 60s after the first request; router %+v", router.Stats())
	}
	t.Logf("FIGURE wake-from-zero %s: first request to first token = %.2f s (sync period %.0f s, model load %.0f s)",
		figure, woke.Seconds(), hpaSync.Seconds(), modelLoad.Seconds())
	scaled, ready := timeline()
	t.Logf("wake-from-zero %s: first request -> HPA scales to 1: %.2f s; -> the Deployment counts it Ready: %.2f s; -> first token: %.2f s (scrape interval %.0f s)",
		figure, scaled.Seconds(), ready.Seconds(), woke.Seconds(), scrapeInterval.Seconds())

	testenv.WaitFor(t, 30*time.Second, "every held request forwarded and answered", func(context.Context) (bool, error) {
		s := router.Stats()
		return s.Held == 0 && s.FirstTokens == s.Received, nil
	})
	if s := router.Stats(); s.Errors != 0 || s.Received != 4 || s.Buffered == 0 || s.Forwarded != 4 {
		t.Fatalf("router after the wake: %+v; want 4 received, buffered, forwarded and answered, no errors", s)
	}
	// Idle again, the model goes back to zero.
	testenv.WaitFor(t, 60*time.Second, "scale back to zero", func(ctx context.Context) (bool, error) {
		d, err := env.Cluster.Client().AppsV1().Deployments(ns).Get(ctx, "llm", metav1.GetOptions{})
		return err == nil && d.Status.Replicas == 0 && *d.Spec.Replicas == 0, nil
	})
}

// watchWake records, from since, when the Deployment is scaled up and when
// its first replica is Ready; the returned function stops watching and
// says (zero for what did not happen).
func watchWake(t *testing.T, ns string, since time.Time) func() (scaled, ready time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var scaled, ready time.Duration
	go func() {
		defer close(done)
		_ = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			d, err := env.Cluster.Client().AppsV1().Deployments(ns).Get(ctx, "llm", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			if scaled == 0 && *d.Spec.Replicas > 0 {
				scaled = time.Since(since)
			}
			if ready == 0 && d.Status.ReadyReplicas > 0 {
				ready = time.Since(since)
			}
			return scaled > 0 && ready > 0, nil
		})
	}()
	t.Cleanup(cancel)
	return func() (time.Duration, time.Duration) {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
		cancel()
		<-done
		return scaled, ready
	}
}
