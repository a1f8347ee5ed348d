package gather

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscale/gpuscale/pkg/adapter/discovery"
)

// KeepPodFields keeps what a Gatherer reads of a pod in the adapter's slim
// informer cache (pkg/kube/podslim): what discovery reads, and the UID and node
// an exporter's per-pod series are checked against.
func KeepPodFields(full, slim *corev1.Pod) {
	discovery.KeepPodFields(full, slim)
	slim.UID = full.UID
	slim.Spec.NodeName = full.Spec.NodeName
}
