package localcluster

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// What AddGPUNode puts on a node, as the NVIDIA device plugin and GPU
// feature discovery would on a real one.
const (
	// GPUResource is the extended resource GPUs are requested as.
	GPUResource corev1.ResourceName = "nvidia.com/gpu"
	// GPUTaintKey is the key of the NoSchedule taint on GPU nodes; GPU pods
	// tolerate it (GPUToleration).
	GPUTaintKey = "nvidia.com/gpu"
	// GPUProduct is the nvidia.com/gpu.product label value.
	GPUProduct = "NVIDIA-H100-80GB-HBM3"
	// GPUInstanceType is the node.kubernetes.io/instance-type label value.
	GPUInstanceType = "gpu-8x"
)

// nodeReadyTimeout bounds the wait for kwok to initialize a node and for
// the node lifecycle controller to lift its not-ready taint.
const nodeReadyTimeout = 30 * time.Second

// GPUToleration tolerates the taint AddGPUNode puts on GPU nodes.
func GPUToleration() corev1.Toleration {
	return corev1.Toleration{Key: GPUTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
}

// AddGPUNode creates a kwok-managed node with gpus nvidia.com/gpu, 64 CPUs,
// 512Gi of memory and room for 110 pods, labelled and tainted like a GPU
// node, and waits until it is Ready and schedulable. kwok marks its pods
// Running and Ready as soon as they are scheduled, with IPs in PodCIDR.
func (c *Cluster) AddGPUNode(ctx context.Context, name string, gpus int) error {
	if gpus < 0 {
		return fmt.Errorf("localcluster: add node %s: negative GPU count %d", name, gpus)
	}
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
		GPUResource:           *resource.NewQuantity(int64(gpus), resource.DecimalSI),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				"kubernetes.io/hostname":           name,
				"kubernetes.io/os":                 "linux",
				"kubernetes.io/arch":               "amd64",
				"node.kubernetes.io/instance-type": GPUInstanceType,
				"nvidia.com/gpu.present":           "true",
				"nvidia.com/gpu.count":             strconv.Itoa(gpus),
				"nvidia.com/gpu.product":           GPUProduct,
			},
			Annotations: map[string]string{FakeNodeAnnotation: fakeNodeValue},
		},
		Spec: corev1.NodeSpec{
			Taints: []corev1.Taint{{Key: GPUTaintKey, Value: "present", Effect: corev1.TaintEffectNoSchedule}},
		},
		// The API server keeps status set on create; kwok's node-initialize
		// stage preserves allocatable and capacity when it adds conditions.
		Status: corev1.NodeStatus{Capacity: resources, Allocatable: resources},
	}
	if _, err := c.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("localcluster: create node %s: %w", name, err)
	}
	return c.waitNodeSchedulable(ctx, name)
}

// waitNodeSchedulable waits until the node is Ready, free of the lifecycle
// controller's not-ready and unreachable taints, and renewing its Lease.
func (c *Cluster) waitNodeSchedulable(ctx context.Context, name string) error {
	var last *corev1.Node
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, nodeReadyTimeout, true,
		func(ctx context.Context) (bool, error) {
			n, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil // transient; the deadline reports persistent failure
			}
			last = n
			if !nodeSchedulable(n) {
				return false, nil
			}
			// Liveness comes from the node's Lease: without renewals the
			// node lifecycle controller marks the node, and every pod on
			// it, NotReady after its grace period.
			l, err := c.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
			return err == nil && l.Spec.RenewTime != nil, nil
		})
	if err != nil {
		return fmt.Errorf("localcluster: node %s not Ready and schedulable within %s (is kwok running? see %s/logs/kwok.log): %w; last status: %s",
			name, nodeReadyTimeout, c.dir, err, describeNode(last))
	}
	return nil
}

func nodeSchedulable(n *corev1.Node) bool {
	ready := false
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return false
		}
	}
	return ready && !n.Spec.Unschedulable
}

func describeNode(n *corev1.Node) string {
	if n == nil {
		return "never read"
	}
	var conds []string
	for _, cond := range n.Status.Conditions {
		conds = append(conds, string(cond.Type)+"="+string(cond.Status))
	}
	var taints []string
	for _, t := range n.Spec.Taints {
		taints = append(taints, t.ToString())
	}
	return fmt.Sprintf("conditions %v, taints %v", conds, taints)
}
