package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscale/gpuscale/internal/harness/devenv"
	"github.com/gpuscale/gpuscale/internal/harness/testenv"
)

// TestPrometheusAnnotationsOptIn: pods that carry only prometheus.io/*
// annotations are not scraped by default; with
// --scrape-prometheus-annotations and a namespace selector, those of the
// selected namespace are and those elsewhere still are not. A pod
// annotated gpuscale.io/scrape beside them shows each adapter has scraped
// since the pods started.
func TestPrometheusAnnotationsOptIn(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	const nsLabel = "e2e.gpuscale.io/prometheus-annotations"
	on, off := namespace(t, "e2e-prom-annotations-on"), namespace(t, "e2e-prom-annotations-off")
	n, err := env.Cluster.Client().CoreV1().Namespaces().Get(ctx, on, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[nsLabel] = "on"
	if _, err := env.Cluster.Client().CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	prometheusOnly := map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "8000"}
	for _, ns := range []string{on, off} {
		annotatedDeployment(t, ns, "prom", prometheusOnly)
		annotatedDeployment(t, ns, "ctl", map[string]string{"gpuscale.io/scrape": "true"})
	}

	// scraped returns the deployments of ns whose pods have a queue depth
	// once the control deployment's pod has one.
	scraped := func(ns string) func(context.Context) (map[string]bool, bool) {
		return func(ctx context.Context) (map[string]bool, bool) {
			l, err := customList(ctx, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/"+ns+"/pods/*/inference_queue_depth")
			if err != nil {
				return nil, false
			}
			got := map[string]bool{}
			for _, it := range l.Items {
				name, _, _ := strings.Cut(it.DescribedObject.Name, "-")
				got[name] = true
			}
			return got, got["ctl"]
		}
	}
	expect := func(phase string, want map[string]bool) {
		t.Helper()
		for _, ns := range []string{on, off} {
			var got map[string]bool
			testenv.WaitFor(t, 60*time.Second, phase+": the control pod of "+ns+" scraped", func(ctx context.Context) (bool, error) {
				g, ok := scraped(ns)(ctx)
				got = g
				// Wait for the prometheus.io pod too where it is expected.
				return ok && (!want[ns] || g["prom"]), nil
			})
			if got["prom"] != want[ns] {
				t.Errorf("%s: the prometheus.io-annotated pod of %s scraped: %v, want %v", phase, ns, got["prom"], want[ns])
			}
		}
	}
	expect("default flags", map[string]bool{on: false, off: false})

	useAdapter(t, []string{"--scrape-interval=" + scrapeInterval.String(), "--max-staleness=" + maxStaleness.String(),
		"--ttft-window=" + ttftWindow.String(), "--window=30s", "--v=2",
		"--scrape-prometheus-annotations", "--prometheus-annotations-namespace-selector=" + nsLabel + "=on"})
	expect("opted in for "+on, map[string]bool{on: true, off: false})
}

// annotatedDeployment creates a one-replica inference Deployment whose pods
// carry annotations in place of gpuscale.io/scrape, and waits for it.
func annotatedDeployment(t *testing.T, ns, name string, annotations map[string]string) {
	t.Helper()
	d := devenv.InferenceDeployment(ns, name, 1, nil)
	d.Spec.Template.Annotations = annotations
	if _, err := env.Cluster.Client().AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 60*time.Second, fmt.Sprintf("a ready replica of %s/%s", ns, name), func(ctx context.Context) (bool, error) {
		got, err := env.Cluster.Client().AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && got.Status.ReadyReplicas == 1, nil
	})
}
