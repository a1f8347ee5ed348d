package discovery

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscale/gpuscale/pkg/kube/podslim"
)

// KeepPodFields keeps what Targets reads of a pod in the adapter's slim
// informer cache (pkg/kube/podslim): labels for the exporter selector, the
// scrape annotations, the controller, placement and phase, and the
// declared container ports.
func KeepPodFields(full, slim *corev1.Pod) {
	slim.Labels = full.Labels
	slim.OwnerReferences = full.OwnerReferences
	slim.DeletionTimestamp = full.DeletionTimestamp
	slim.Spec.NodeName = full.Spec.NodeName
	slim.Spec.HostNetwork = full.Spec.HostNetwork
	slim.Status.Phase = full.Status.Phase
	slim.Status.PodIP = full.Status.PodIP
	podslim.Annotations(full, slim, scrapeAnnotation)
	for _, c := range full.Spec.Containers {
		if len(c.Ports) > 0 {
			podslim.Container(slim, c.Name).Ports = c.Ports
		}
	}
}

// scrapeAnnotation reports whether an annotation may say how to scrape a
// pod: the gpuscale.io/ and prometheus.io/ families.
func scrapeAnnotation(key string) bool {
	return strings.HasPrefix(key, "gpuscale.io/") || strings.HasPrefix(key, "prometheus.io/")
}
