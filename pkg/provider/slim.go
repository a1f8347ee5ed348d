package provider

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscale/gpuscale/pkg/kube/podslim"
)

// KeepPodFields keeps what the provider reads of a pod in the adapter's
// slim informer cache (pkg/kube/podslim): labels for the selectors, readiness
// (podReady), the resource version that tells a change from a resync, the
// UID the capacity signal follows each server's counters by, and
// the creation and Ready times the capacity signal measures start-up from.
func KeepPodFields(full, slim *corev1.Pod) {
	slim.UID = full.UID
	slim.Labels = full.Labels
	slim.CreationTimestamp = full.CreationTimestamp
	slim.ResourceVersion = full.ResourceVersion
	slim.DeletionTimestamp = full.DeletionTimestamp
	slim.Status.Phase = full.Status.Phase
	podslim.Condition(full, slim, corev1.PodReady)
}
