package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/scaledown"
	"github.com/gpuscale/gpuscale/pkg/signal/capacity"
	"github.com/gpuscale/gpuscale/pkg/signal/recommend"
)

// RecommendOptions are the flags of `adapter recommend`.
type RecommendOptions struct {
	Kubeconfig  string
	Namespace   string
	GPUsPerNode int64
	Autoscaler  recommend.Autoscaler
	// TTFTWindow is the adapter's --ttft-window (recommend.Workload's
	// SignalWindow; 0: recommend.DefaultSignalWindow, the adapter's
	// default).
	TTFTWindow time.Duration
	// read reads a pod's metrics; nil: through the API server's pod proxy.
	read exposition
}

// AddFlags registers the options.
func (o *RecommendOptions) AddFlags(fs *pflag.FlagSet) {
	ca := &o.Autoscaler
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig of the cluster (default: $KUBECONFIG, ~/.kube/config, in-cluster).")
	fs.StringVarP(&o.Namespace, "namespace", "n", o.Namespace, "Namespace of the HPAs (default: all namespaces).")
	fs.Int64Var(&o.GPUsPerNode, "gpus-per-node", o.GPUsPerNode, "GPUs per node of the node group (default: the most allocatable nvidia.com/gpu among the nodes the workload runs on).")
	fs.DurationVar(&ca.UnneededTime, "scale-down-unneeded-time", ca.UnneededTime, "The cluster autoscaler's --scale-down-unneeded-time.")
	fs.DurationVar(&ca.DelayAfterAdd, "scale-down-delay-after-add", ca.DelayAfterAdd, "The cluster autoscaler's --scale-down-delay-after-add.")
	fs.Float64Var(&ca.GPUUtilizationThreshold, "scale-down-gpu-utilization-threshold", ca.GPUUtilizationThreshold, "The cluster autoscaler's --scale-down-gpu-utilization-threshold (GPU nodes are rated by it, not by --scale-down-utilization-threshold).")
	fs.Var(secondsValue{&ca.MaxGracefulTermination}, "max-graceful-termination-sec", "The cluster autoscaler's --max-graceful-termination-sec.")
	fs.DurationVar(&o.TTFTWindow, "ttft-window", NewOptions().TTFTWindow, "The adapter's --ttft-window: the window the capacity signal measures TTFT over, which paces scale-down.")
}

// secondsValue is a duration flag given in whole seconds, as the cluster
// autoscaler's --max-graceful-termination-sec is.
type secondsValue struct{ d *time.Duration }

func (v secondsValue) String() string { return fmt.Sprint(int64(v.d.Seconds())) }
func (v secondsValue) Type() string   { return "int" }
func (v secondsValue) Set(s string) error {
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil || n < 0 {
		return fmt.Errorf("not a non-negative number of seconds: %q", s)
	}
	*v.d = time.Duration(n) * time.Second
	return nil
}

// RunRecommend is `adapter recommend`: for every HPA whose target's pod
// template carries gpuscale.io/scale-down=managed, it prints a recommended
// behavior with the reason for every number.
func RunRecommend(ctx context.Context, args []string, out io.Writer) error {
	o := RecommendOptions{Autoscaler: recommend.DefaultAutoscaler()}
	fs := pflag.NewFlagSet("adapter recommend", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	if t := o.Autoscaler.GPUUtilizationThreshold; t <= 0 || t > 1 {
		return fmt.Errorf("--scale-down-gpu-utilization-threshold must be in (0, 1], got %g", t)
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return writeRecommendations(ctx, client, o, out)
}

// writeRecommendations gathers the inputs and prints one YAML document per
// HPA.
func writeRecommendations(ctx context.Context, client kubernetes.Interface, o RecommendOptions, out io.Writer) error {
	ws, err := gatherWorkloads(ctx, client, o)
	if err != nil {
		return err
	}
	if len(ws) == 0 {
		_, err := fmt.Fprintf(out, "# no HPA scales a workload whose pod template is labelled %s=%s\n", scaledown.ManagedLabel, scaledown.ManagedValue)
		return err
	}
	for _, w := range ws {
		r := recommend.Recommend(w, o.Autoscaler)
		if err := r.WriteYAML(out); err != nil {
			return err
		}
	}
	return nil
}

// gatherWorkloads measures every HPA of a managed workload.
func gatherWorkloads(ctx context.Context, client kubernetes.Interface, o RecommendOptions) ([]recommend.Workload, error) {
	hpas, err := client.AutoscalingV2().HorizontalPodAutoscalers(o.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing HPAs: %w", err)
	}
	var nodes []corev1.Node
	if o.GPUsPerNode == 0 {
		l, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing nodes (or pass --gpus-per-node): %w", err)
		}
		nodes = l.Items
	}
	var out []recommend.Workload
	for i := range hpas.Items {
		h := &hpas.Items[i]
		tmpl, sel, err := scaleTarget(ctx, client, h)
		if err != nil {
			return nil, err
		}
		if tmpl == nil || tmpl.Labels[scaledown.ManagedLabel] != scaledown.ManagedValue {
			continue
		}
		pods, err := client.CoreV1().Pods(h.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return nil, fmt.Errorf("listing pods of %s/%s: %w", h.Namespace, h.Name, err)
		}
		w := measure(h, tmpl, pods.Items, nodes, o.GPUsPerNode)
		w.SignalWindow = o.TTFTWindow
		read := o.read
		if read == nil {
			read = proxyExposition(client)
		}
		w.Streams, w.StreamErrors = streamsOf(ctx, read, pods.Items)
		w.Container = servingContainer(tmpl)
		w.ShutdownTimeout = shutdownTimeoutOf(tmpl, w.Container)
		out = append(out, w)
	}
	return out, nil
}

// scaleTarget returns the pod template and selector of an HPA's target,
// or a nil template for kinds it cannot read.
func scaleTarget(ctx context.Context, client kubernetes.Interface, h *autoscalingv2.HorizontalPodAutoscaler) (*corev1.PodTemplateSpec, string, error) {
	ref, apps := h.Spec.ScaleTargetRef, client.AppsV1()
	var (
		tmpl corev1.PodTemplateSpec
		sel  *metav1.LabelSelector
		err  error
	)
	switch ref.Kind {
	case "Deployment":
		d, e := apps.Deployments(h.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err = e; err == nil {
			tmpl, sel = d.Spec.Template, d.Spec.Selector
		}
	case "StatefulSet":
		s, e := apps.StatefulSets(h.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err = e; err == nil {
			tmpl, sel = s.Spec.Template, s.Spec.Selector
		}
	case "ReplicaSet":
		rs, e := apps.ReplicaSets(h.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err = e; err == nil {
			tmpl, sel = rs.Spec.Template, rs.Spec.Selector
		}
	default:
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("target %s/%s of HPA %s/%s: %w", ref.Kind, ref.Name, h.Namespace, h.Name, err)
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, "", fmt.Errorf("selector of %s/%s: %w", ref.Kind, ref.Name, err)
	}
	return &tmpl, s.String(), nil
}

// measure turns an HPA, its target's template and pods into the inputs of
// a recommendation. GPUs per node, unless given, is the most allocatable
// on the nodes the pods run on, or on any node when none runs.
func measure(h *autoscalingv2.HorizontalPodAutoscaler, tmpl *corev1.PodTemplateSpec, pods []corev1.Pod, nodes []corev1.Node, gpusPerNode int64) recommend.Workload {
	w := recommend.Workload{
		HPA:        h.Namespace + "/" + h.Name,
		Target:     h.Spec.ScaleTargetRef.Kind + "/" + h.Spec.ScaleTargetRef.Name,
		GPUsPerPod: scaledown.PodGPUs(&corev1.Pod{Spec: tmpl.Spec}, scaledown.DefaultGPUResource),
		Current:    h.Spec.Behavior,
		ClosedLoop: closedLoop(h, tmpl),
	}
	if g := tmpl.Spec.TerminationGracePeriodSeconds; g != nil {
		w.TerminationGracePeriod = time.Duration(*g) * time.Second
	}
	onNodes := map[string]bool{}
	for i := range pods {
		if pods[i].DeletionTimestamp != nil {
			continue
		}
		if d, ok := recommend.StartupTime(&pods[i]); ok {
			w.Startup = append(w.Startup, d)
		}
		onNodes[pods[i].Spec.NodeName] = true
	}
	w.GPUsPerNode = gpusPerNode
	if w.GPUsPerNode == 0 {
		var largest int64
		for _, n := range nodes {
			q := n.Status.Allocatable[scaledown.DefaultGPUResource]
			largest = max(largest, q.Value())
			if onNodes[n.Name] {
				w.GPUsPerNode = max(w.GPUsPerNode, q.Value())
			}
		}
		if w.GPUsPerNode == 0 {
			w.GPUsPerNode = largest
		}
	}
	return w
}

// closedLoop says whether h reads the capacity signal with its closed
// loop, which corrects the model by the TTFT the servers measure: the
// capacity configuration the adapter serves the HPA's pool (its role, from
// its pods' labels or an External selector's role) says so
// (provider.RoleCapacityConfig holds a prefill or decode pool's loop open).
// It is the adapter's default configuration: one that set the loop's
// bounds to 1 would hold every loop open, which `adapter recommend` does
// not see.
func closedLoop(h *autoscalingv2.HorizontalPodAutoscaler, tmpl *corev1.PodTemplateSpec) bool {
	podsRole := provider.RoleOf(tmpl.Labels)
	for _, m := range h.Spec.Metrics {
		role := podsRole
		switch {
		case m.Object != nil && m.Object.Metric.Name == provider.CapacityUtilization,
			m.Pods != nil && m.Pods.Metric.Name == provider.CapacityUtilization:
		case m.External != nil && m.External.Metric.Name == provider.CapacityUtilization:
			if role == provider.RoleNone {
				role = externalRole(m.External.Metric.Selector)
			}
		default:
			continue
		}
		return provider.RoleCapacityConfig(capacity.DefaultConfig(), role).ClosedLoop()
	}
	return false
}

// externalRole is the role an External metric's selector names, as the
// provider reads it.
func externalRole(sel *metav1.LabelSelector) provider.Role {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return provider.RoleNone
	}
	return provider.ExternalRole(s)
}
