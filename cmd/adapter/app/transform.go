package app

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// slimPod keeps only what discovery and the provider read from a pod, so
// the informer's cache holds a fraction of each object: with 10,000 pods
// the full objects (managed fields, specs, env) are most of the adapter's
// memory.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // tombstones and the like pass through
	}
	out := &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: p.Labels, Annotations: scrapeAnnotations(p.Annotations), OwnerReferences: p.OwnerReferences,
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec: corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork},
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP,
			Conditions: readyCondition(p.Status.Conditions)},
	}
	for _, c := range p.Spec.Containers {
		if len(c.Ports) > 0 {
			out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: c.Name, Ports: c.Ports})
		}
	}
	return out, nil
}

func scrapeAnnotations(a map[string]string) map[string]string {
	var out map[string]string
	for k, v := range a {
		if strings.HasPrefix(k, "gpuscale.io/") || strings.HasPrefix(k, "prometheus.io/") {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

func readyCondition(cs []corev1.PodCondition) []corev1.PodCondition {
	for _, c := range cs {
		if c.Type == corev1.PodReady {
			return []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return nil
}
