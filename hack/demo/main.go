// Command demo is `make demo`: gpuscale on a real local control plane. It
// starts the kube-apiserver (with aggregation), the real HPA controller at
// its default 15 s sync, kwok GPU nodes, the exporter DaemonSet on
// simulated GPUs, simulated vLLM servers and the adapter; creates a
// Deployment with the HPA the README recommends (the Deployment's
// inference_capacity_utilization at value 0.8) and the behavior `adapter
// recommend` gives for it; drives a load step; and prints a table of what
// happens until interrupted, then exits 0. The kubeconfig is written to
// _output/demo/kubeconfig.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuscale/gpuscale/internal/harness/devenv"
	"github.com/gpuscale/gpuscale/internal/harness/localcluster"
	"github.com/gpuscale/gpuscale/pkg/scaledown"
	"github.com/gpuscale/gpuscale/pkg/signal/recommend"
)

const (
	ns       = "demo"
	workload = "llm"
	// gpusPerNode is the kwok nodes'.
	gpusPerNode = 8
	// modelLoad is how long a new replica loads its model before it turns
	// Ready, as a vLLM server does (an 8B model from a node's cache takes
	// about half a minute; the bench's replicas take a minute). Without it
	// a simulated pod is Ready within the second it is created: no
	// start-up is measured, so `adapter recommend` falls back to the HPA's
	// default window and the capacity signal's forecast horizon and closed
	// loop, which both run on the start-up, are off.
	modelLoad = 30 * time.Second
)

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
	// The components' own logs go to files under _output/demo/env/logs;
	// here only what needs attention.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	fmt.Println("demo: starting a local control plane (the first run builds it from Go modules: about 20 minutes)")
	fmt.Println("demo: the GPUs are simulated (every series is labelled simulated=\"true\")")
	env, err := devenv.Up(ctx, devenv.Options{Dir: filepath.Join(out, "env"), Nodes: 2, GPUsPerNode: gpusPerNode,
		HPASyncPeriod: 15 * time.Second, Logger: log, AdapterArgs: []string{"--scrape-interval=2s", "--scale-down-controller"}})
	if err != nil {
		if ctx.Err() != nil {
			fmt.Println("demo: interrupted while starting")
			return nil
		}
		return err
	}
	defer func() { _ = env.Down() }()
	kubeconfig := filepath.Join(out, "kubeconfig")
	b, err := os.ReadFile(env.Cluster.AdminKubeconfig())
	if err != nil {
		return err
	}
	if err := os.WriteFile(kubeconfig, b, 0o600); err != nil {
		return err
	}
	behavior, err := createWorkload(ctx, env.Cluster.Client())
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	fmt.Printf(`
demo: gpuscale is up. Try:
  export KUBECONFIG=%s
  kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta2/namespaces/demo/deployments.apps/llm/inference_capacity_utilization"
  kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta2/namespaces/demo/pods/*/inference_queue_depth"
  kubectl get hpa -n demo -w
(kubectl: %s)

demo: the HPA is the README's: inference_capacity_utilization of Deployment llm at value 0.8,
with the behavior `+"`adapter recommend`"+` gives for its measured start-up (%s);
a new replica loads its model for %v before it serves.
`, kubeconfig, env.Cluster.KubectlPath(), describe(behavior), modelLoad)

	sel := labels.SelectorFromSet(map[string]string{"app": workload})
	steps := []step{{0, 2}, {30 * time.Second, 40}, {4 * time.Minute, 2}}
	t := newTable(os.Stdout)
	start := time.Now()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		el := time.Since(start)
		for len(steps) > 0 && el >= steps[0].at {
			env.World.SetRate(ns, sel, steps[0].rate)
			t.rate = steps[0].rate
			steps = steps[1:]
		}
		t.row(el, sample(ctx, env.Cluster.Client()))
		select {
		case <-ctx.Done():
			fmt.Println("demo: stopping")
			return nil
		case <-tick.C:
		}
	}
}

type step struct {
	at   time.Duration
	rate float64
}

// createWorkload makes the namespace, the Deployment (labelled for the
// scale-down controller, which `adapter recommend` reads) and, once its
// first replica has started, the README's HPA with the recommended
// behavior.
func createWorkload(ctx context.Context, c kubernetes.Interface) (*autoscalingv2.HorizontalPodAutoscalerBehavior, error) {
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	d := devenv.InferenceDeployment(ns, workload, 1, map[string]string{scaledown.ManagedLabel: scaledown.ManagedValue})
	d.Spec.Template.Annotations[localcluster.ReadyAfterAnnotation] = modelLoad.String()
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	startups, err := waitStartups(ctx, c, d.Spec.Template.Labels)
	if err != nil {
		return nil, err
	}
	h := readmeHPA()
	rec := recommend.Recommend(recommend.Workload{HPA: ns + "/" + h.Name, Target: "Deployment/" + workload,
		Startup: startups, ClosedLoop: true, GPUsPerPod: 1, GPUsPerNode: gpusPerNode}, recommend.DefaultAutoscaler())
	h.Spec.Behavior = &rec.Behavior
	_, err = c.AutoscalingV2().HorizontalPodAutoscalers(ns).Create(ctx, h, metav1.CreateOptions{})
	return &rec.Behavior, err
}

// waitStartups waits for a Ready replica and returns the start-up times
// `adapter recommend` measures.
func waitStartups(ctx context.Context, c kubernetes.Interface, sel map[string]string) ([]time.Duration, error) {
	for {
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(sel).String()})
		if err != nil {
			return nil, err
		}
		var out []time.Duration
		for i := range pods.Items {
			if d, ok := recommend.StartupTime(&pods.Items[i]); ok {
				out = append(out, d)
			}
		}
		if len(out) > 0 {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func describe(b *autoscalingv2.HorizontalPodAutoscalerBehavior) string {
	if b == nil || b.ScaleUp == nil || b.ScaleDown == nil {
		return "the HPA's defaults"
	}
	return fmt.Sprintf("scale-up window %ds, scale-down window %ds", deref(b.ScaleUp.StabilizationWindowSeconds), deref(b.ScaleDown.StabilizationWindowSeconds))
}

func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// observation is one row's reading: the HPA's replicas and signal, and the
// Deployment's TTFT p90 and queue from the custom metrics API, as the HPA
// reads them. A reading not there yet is nil.
type observation struct {
	current, desired int32
	haveReplicas     bool
	signal           *float64
	ttftP90, queue   *float64
}

func sample(ctx context.Context, c kubernetes.Interface) observation {
	var o observation
	h, err := c.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, workload+"-capacity", metav1.GetOptions{})
	// Desired 0 means the HPA has not computed yet (minReplicas is 1).
	if err == nil && h.Status.DesiredReplicas > 0 {
		o.current, o.desired, o.haveReplicas = h.Status.CurrentReplicas, h.Status.DesiredReplicas, true
	}
	if err == nil && len(h.Status.CurrentMetrics) > 0 && h.Status.CurrentMetrics[0].Object != nil {
		if v := h.Status.CurrentMetrics[0].Object.Current.Value; v != nil {
			f := v.AsApproximateFloat64()
			o.signal = &f
		}
	}
	o.ttftP90 = objectValue(ctx, c, "inference_ttft_seconds_p90")
	o.queue = objectValue(ctx, c, "inference_queue_depth")
	return o
}

// objectValue reads the Deployment's value of metric through the
// aggregation layer; nil when there is none (no fresh sample).
func objectValue(ctx context.Context, c kubernetes.Interface, metric string) *float64 {
	path := "/apis/custom.metrics.k8s.io/v1beta2/namespaces/" + ns + "/deployments.apps/" + workload + "/" + metric
	b, err := c.Discovery().RESTClient().Get().AbsPath(path).DoRaw(ctx)
	if err != nil {
		return nil
	}
	v, err := parseMetricValue(b)
	if err != nil {
		return nil
	}
	return &v
}

// table prints the readings with units, one row per reading.
type table struct {
	w       io.Writer
	rate    float64
	printed bool
}

func newTable(w io.Writer) *table { return &table{w: w} }

const header = "    time  load (req/s)  replicas (now -> wanted)  capacity utilization (target 0.80)  TTFT p90  queue (requests)\n"

func (t *table) row(el time.Duration, o observation) {
	if !t.printed {
		fmt.Fprint(t.w, "\n"+header)
		t.printed = true
	}
	replicas := "-"
	if o.haveReplicas {
		replicas = fmt.Sprintf("%d -> %d", o.current, o.desired)
	}
	fmt.Fprintf(t.w, "%8s  %12.0f  %24s  %34s  %8s  %16s\n", clock(el), t.rate, replicas,
		orDash(o.signal, "%.2f"), orDash(o.ttftP90, "%.2f s"), orDash(o.queue, "%.1f"))
}

func clock(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}

func orDash(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

var errNoValue = errors.New("no value")
