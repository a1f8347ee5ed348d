package scaledown

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscale/gpuscale/pkg/kube/podslim"
)

// keptAnnotations are the pod annotations the controller reads: its own
// and those the cluster autoscaler and the ReplicaSet controller read.
var keptAnnotations = map[string]bool{DeletionCostAnnotation: true, SafeToEvictAnnotation: true,
	ProtectedAnnotation: true, MirrorPodAnnotation: true}

// KeepPodFields returns what the controller reads of a pod, for the
// adapter's slim informer cache (pkg/kube/podslim), with GPUs requested as res:
// the opt-in label, identity, controller, placement and phase, the
// annotations it reads and writes, and each container's request of res.
func KeepPodFields(res corev1.ResourceName) podslim.Keep {
	return func(full, slim *corev1.Pod) {
		slim.Labels = full.Labels
		slim.UID = full.UID
		slim.OwnerReferences = full.OwnerReferences
		slim.DeletionTimestamp = full.DeletionTimestamp
		slim.Spec.NodeName = full.Spec.NodeName
		slim.Status.Phase = full.Status.Phase
		podslim.Annotations(full, slim, func(k string) bool { return keptAnnotations[k] })
		for i := range full.Spec.Containers {
			if r, ok := requestOf(&full.Spec.Containers[i], res); ok {
				podslim.Container(slim, full.Spec.Containers[i].Name).Resources = r
			}
		}
		for i := range full.Spec.InitContainers {
			if r, ok := requestOf(&full.Spec.InitContainers[i], res); ok {
				podslim.InitContainer(slim, full.Spec.InitContainers[i].Name).Resources = r
			}
		}
	}
}

// requestOf is a container's request and limit of res alone.
func requestOf(c *corev1.Container, res corev1.ResourceName) (corev1.ResourceRequirements, bool) {
	var r corev1.ResourceRequirements
	if q, ok := c.Resources.Requests[res]; ok {
		r.Requests = corev1.ResourceList{res: q}
	}
	if q, ok := c.Resources.Limits[res]; ok {
		r.Limits = corev1.ResourceList{res: q}
	}
	return r, r.Requests != nil || r.Limits != nil
}
