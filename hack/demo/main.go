// Command demo is `make demo`: gpuscale on a real local control plane. It
// starts the kube-apiserver (with aggregation), the real HPA controller,
// kwok GPU nodes, the exporter DaemonSet on simulated GPUs, simulated vLLM
// servers and the adapter; creates a Deployment with the README's
// gpu_utilization HPA; drives a load step; and prints what the HPA does
// until interrupted. The kubeconfig is written to _output/demo/kubeconfig.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/internal/devenv"
	"github.com/gpuscale/gpuscale/pkg/scaledown"
)

const ns = "demo"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out, err := filepath.Abs("_output/demo")
	if err != nil {
		return err
	}
	_ = os.RemoveAll(out)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	fmt.Println("demo: starting a local control plane (the first run builds it from Go modules: about 20 minutes)")
	env, err := devenv.Up(ctx, devenv.Options{Dir: filepath.Join(out, "env"), Nodes: 2, GPUsPerNode: 8,
		HPASyncPeriod: 5 * time.Second, Logger: log, AdapterArgs: []string{"--scrape-interval=2s", "--scale-down-controller"}})
	if err != nil {
		return err
	}
	defer env.Down()
	kubeconfig := filepath.Join(out, "kubeconfig")
	b, err := os.ReadFile(env.Cluster.AdminKubeconfig())
	if err != nil {
		return err
	}
	if err := os.WriteFile(kubeconfig, b, 0o600); err != nil {
		return err
	}
	if err := createWorkload(ctx, env); err != nil {
		return err
	}
	fmt.Printf(`
demo: gpuscale is up. Try:
  export KUBECONFIG=%s
  kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta2/namespaces/demo/pods/*/gpu_utilization"
  kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta2/namespaces/demo/pods/*/inference_queue_depth"
  kubectl get hpa -n demo -w
(kubectl: %s)
`, kubeconfig, env.Cluster.KubectlPath())

	sel := labels.SelectorFromSet(map[string]string{"app": "llm"})
	env.World.SetRate(ns, sel, 2)
	steps := []struct {
		at   time.Duration
		rate float64
	}{{30 * time.Second, 40}, {3 * time.Minute, 2}}
	start := time.Now()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Println("demo: stopping")
			return nil
		case <-tick.C:
		}
		el := time.Since(start)
		for len(steps) > 0 && el >= steps[0].at {
			fmt.Printf("demo: load step to %.0f req/s\n", steps[0].rate)
			env.World.SetRate(ns, sel, steps[0].rate)
			steps = steps[1:]
		}
		h, err := env.Cluster.Client().AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, "llm", metav1.GetOptions{})
		if err != nil {
			continue
		}
		cur := "<unknown>"
		if len(h.Status.CurrentMetrics) > 0 && h.Status.CurrentMetrics[0].Pods != nil {
			cur = h.Status.CurrentMetrics[0].Pods.Current.AverageValue.String()
		}
		fmt.Printf("demo: t=%3.0fs gpu_utilization=%s (target 70) replicas %d -> %d\n",
			el.Seconds(), cur, h.Status.CurrentReplicas, h.Status.DesiredReplicas)
	}
}

func createWorkload(ctx context.Context, env *devenv.Env) error {
	c := env.Cluster.Client()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	one := int32(1)
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, devenv.InferenceDeployment(ns, "llm", one,
		map[string]string{scaledown.ManagedLabel: scaledown.ManagedValue}), metav1.CreateOptions{}); err != nil {
		return err
	}
	seventy := resource.MustParse("70")
	h := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: ns},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "llm"},
			MinReplicas:    &one, MaxReplicas: 8,
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: "gpu_utilization"},
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: &seventy}}}},
		},
	}
	_, err := c.AutoscalingV2().HorizontalPodAutoscalers(ns).Create(ctx, h, metav1.CreateOptions{})
	return err
}
