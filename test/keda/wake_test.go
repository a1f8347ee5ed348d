package keda

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscale/gpuscale/internal/harness/devenv"
	"github.com/gpuscale/gpuscale/internal/harness/localcluster"
	"github.com/gpuscale/gpuscale/internal/harness/simworld"
	"github.com/gpuscale/gpuscale/internal/harness/testenv"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

// kedaRequests is the adapter's counter of the calls KEDA makes to its
// scaler port, by method and gRPC code.
const kedaRequests = "gpuscale_adapter_keda_scaler_requests_total"

// modelLoad is how long a woken replica takes to become Ready, as a model
// server loading its weights does (kwok's ready-after stage); the HPA
// scenario in test/e2e uses the same.
const modelLoad = 2 * time.Second

// TestKEDAWakeFromZero: a ScaledObject (minReplicaCount 0, external-push)
// whose gpuscale trigger reads the model's per-model External
// inference_queue_depth scales the idle model to zero; the first request,
// held by the router in front of the model, wakes it (StreamIsActive
// pushes the activity, KEDA's operator scales to one); load scales it to
// N through KEDA's HPA, and idle it goes back to zero. No held request is
// lost or answered with an error.
func TestKEDAWakeFromZero(t *testing.T) {
	needEnv(t)
	ns := namespace(t, "keda-wake")
	scalerAuth(t, ns)
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
	scaledObject(t, ns, "llm", 3, map[string]string{"signal": "inference_queue_depth", "model": "model-llm", "target": "1", "activationTarget": "0"})
	testenv.WaitFor(t, 90*time.Second, "KEDA to scale the idle model to zero", func(ctx context.Context) (bool, error) {
		ready, want := replicas(ctx, ns, "llm")
		return want == 0 && ready == 0, nil
	})
	// Held at zero: the idle router's queue is 0, inactive, over three
	// more checks by KEDA's scale loop (each ends with IsActive).
	isActive := map[string]string{"method": "IsActive", "code": "OK"}
	checked, err := env.AdapterCounter(ctx, kedaRequests, isActive)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "KEDA's operator to check the idle trigger 3 more times", func(ctx context.Context) (bool, error) {
		c, err := env.AdapterCounter(ctx, kedaRequests, isActive)
		return err == nil && c >= checked+3, nil
	})
	if _, want := replicas(ctx, ns, "llm"); want != 0 {
		t.Fatalf("idle model: %d replicas wanted, want 0", want)
	}

	firstToken := make(chan time.Time, 1)
	sent := time.Now()
	if err := router.Send(inferencesim.Request{ContextTokens: 400, GeneratedTokens: 8}, func(time.Duration) {
		firstToken <- time.Now()
	}); err != nil {
		t.Fatal(err)
	}
	for range 3 { // more while the model loads: they too must be answered
		if err := router.Send(inferencesim.DefaultRequest, nil); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case at := <-firstToken:
		t.Logf("FIGURE wake-from-zero keda: first request to first token = %.2f s (external-push, check interval 0.25 s, scrape interval %.0f s, model load %.0f s)",
			at.Sub(sent).Seconds(), scrapeInterval.Seconds(), modelLoad.Seconds())
	case <-time.After(60 * time.Second):
		t.Fatalf("no first token 60s after the first request; router %+v", router.Stats())
	}
	testenv.WaitFor(t, 30*time.Second, "every held request forwarded and answered", func(context.Context) (bool, error) {
		s := router.Stats()
		return s.Held == 0 && s.FirstTokens == s.Received, nil
	})
	if s := router.Stats(); s.Errors != 0 || s.Received != 4 || s.Buffered == 0 || s.Forwarded != 4 {
		t.Fatalf("router after the wake: %+v; want 4 received, buffered, forwarded and answered, no errors", s)
	}

	sel := labelsOf(d)
	env.World.SetRate(ns, sel, 45) // about three replicas' capacity: the queue grows
	testenv.WaitFor(t, 90*time.Second, "KEDA's HPA to scale to at least 2 under load", func(ctx context.Context) (bool, error) {
		ready, _ := replicas(ctx, ns, "llm")
		return ready >= 2, nil
	})
	env.World.SetRate(ns, sel, 0)
	testenv.WaitFor(t, 90*time.Second, "KEDA to return the idle model to zero", func(ctx context.Context) (bool, error) {
		ready, want := replicas(ctx, ns, "llm")
		return want == 0 && ready == 0, nil
	})
}
