package scaledown

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The label that opts a workload in, and the annotations the controller
// reads and writes.
const (
	// ManagedLabel opts a pod in when its value is ManagedValue; set it in
	// a workload's pod template.
	ManagedLabel = "gpuscale.io/scale-down"
	ManagedValue = "managed"
	// DeletionCostAnnotation is read by the ReplicaSet controller when it
	// picks replicas to remove: lower cost goes first.
	DeletionCostAnnotation = "controller.kubernetes.io/pod-deletion-cost"
	// SafeToEvictAnnotation set to "false" stops the cluster autoscaler
	// from draining the pod's node.
	SafeToEvictAnnotation = "cluster-autoscaler.kubernetes.io/safe-to-evict"
	// ProtectedAnnotation marks a safe-to-evict the controller set itself,
	// so that it only ever clears its own: a safe-to-evict written in a
	// pod template belongs to its author.
	ProtectedAnnotation = "gpuscale.io/scale-down-protected"
	// ScaleDownDisabledAnnotation on a node keeps the cluster autoscaler
	// from removing it.
	ScaleDownDisabledAnnotation = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
	// MirrorPodAnnotation marks static pods' mirrors, which the cluster
	// autoscaler ignores when draining.
	MirrorPodAnnotation = "kubernetes.io/config.mirror"
	// DefaultGPUResource is the extended resource GPUs are requested as.
	DefaultGPUResource corev1.ResourceName = "nvidia.com/gpu"
)

// Reasons a node cannot be removed, as labels of the blocked metric.
const (
	ReasonSafeToEvictFalse     = "safe_to_evict_false"
	ReasonScaleDownDisabled    = "scale_down_disabled"
	ReasonPodWithoutController = "pod_without_controller"
)

// blockReasons lists the reasons in the order metrics report them.
var blockReasons = [...]string{ReasonSafeToEvictFalse, ReasonScaleDownDisabled, ReasonPodWithoutController}

func isManaged(p *corev1.Pod) bool { return p.Labels[ManagedLabel] == ManagedValue }

// active reports whether a pod still holds its node's resources.
func active(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// PodGPUs is the pod's effective request of res: the containers' sum, or
// the largest init container's when that is more (init containers run
// before the others, one at a time). Extended resources may be set as
// limits only; the API server then defaults the request to the limit.
func PodGPUs(p *corev1.Pod, res corev1.ResourceName) int64 {
	var sum int64
	for i := range p.Spec.Containers {
		sum += containerGPUs(&p.Spec.Containers[i], res)
	}
	for i := range p.Spec.InitContainers {
		sum = max(sum, containerGPUs(&p.Spec.InitContainers[i], res))
	}
	return sum
}

func containerGPUs(c *corev1.Container, res corev1.ResourceName) int64 {
	if q, ok := c.Resources.Requests[res]; ok {
		return q.Value()
	}
	if q, ok := c.Resources.Limits[res]; ok {
		return q.Value()
	}
	return 0
}

// blockReason says whether a pod keeps the cluster autoscaler from
// draining its node, following its drain rules for the cases gpuscale
// reports: DaemonSet and mirror pods are ignored, safe-to-evict "true"
// always allows, "false" always blocks, and a pod no controller would
// recreate blocks.
func blockReason(p *corev1.Pod) (string, bool) {
	ref := metav1.GetControllerOf(p)
	if ref != nil && (ref.Kind == "DaemonSet" || ref.Kind == "Node") {
		return "", false
	}
	if _, mirror := p.Annotations[MirrorPodAnnotation]; mirror {
		return "", false
	}
	switch p.Annotations[SafeToEvictAnnotation] {
	case "true":
		return "", false
	case "false":
		return ReasonSafeToEvictFalse, true
	}
	if ref == nil {
		return ReasonPodWithoutController, true
	}
	return "", false
}

func nodeGPUs(n *corev1.Node, res corev1.ResourceName) int64 {
	q, ok := n.Status.Allocatable[res]
	if !ok {
		return 0
	}
	return q.Value()
}
