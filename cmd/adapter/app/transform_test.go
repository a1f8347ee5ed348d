package app

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscale/gpuscale/pkg/discovery"
)

func TestSlimPodKeepsWhatDiscoveryAndProviderRead(t *testing.T) {
	now := metav1.Now()
	full := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: map[string]string{"app": "llm"},
			Annotations: map[string]string{"gpuscale.io/scrape": "true", "gpuscale.io/port": "8000",
				"prometheus.io/path": "/m", "kubectl.kubernetes.io/last-applied-configuration": "{huge}"},
			ManagedFields:     []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
			UID:               "uid-p",
			OwnerReferences:   []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "ds"}},
			DeletionTimestamp: &now},
		Spec: corev1.PodSpec{NodeName: "n1", HostNetwork: true, Containers: []corev1.Container{
			{Name: "vllm", Image: "vllm/vllm-openai", Args: []string{"--model", "x"}, Ports: []corev1.ContainerPort{{ContainerPort: 8000}}},
			{Name: "sidecar", Image: "envoy"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue, Reason: "x"}}},
	}
	obj, err := slimPod(full)
	if err != nil {
		t.Fatal(err)
	}
	p := obj.(*corev1.Pod)
	if p.ManagedFields != nil || p.Annotations["kubectl.kubernetes.io/last-applied-configuration"] != "" {
		t.Error("managed fields and unrelated annotations must be dropped")
	}
	if p.Annotations[discovery.AnnotationScrape] != "true" || p.Annotations[discovery.AnnotationPort] != "8000" || p.Annotations["prometheus.io/path"] != "/m" {
		t.Errorf("scrape annotations lost: %v", p.Annotations)
	}
	// Discovery's and the gatherer's trust checks read these.
	if !p.Spec.HostNetwork || p.UID != "uid-p" || len(p.OwnerReferences) != 1 || p.OwnerReferences[0].Name != "ds" {
		t.Errorf("host network, UID or owner lost: %+v", p)
	}
	if p.Labels["app"] != "llm" || p.Spec.NodeName != "n1" || p.Status.PodIP != "10.0.0.1" || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp == nil {
		t.Errorf("identity, placement or phase lost: %+v", p)
	}
	if len(p.Status.Conditions) != 1 || p.Status.Conditions[0].Type != corev1.PodReady || p.Status.Conditions[0].Status != corev1.ConditionTrue {
		t.Errorf("ready condition = %+v", p.Status.Conditions)
	}
	if len(p.Spec.Containers) != 1 || p.Spec.Containers[0].Ports[0].ContainerPort != 8000 || p.Spec.Containers[0].Image != "" {
		t.Errorf("containers = %+v", p.Spec.Containers)
	}
	if other, _ := slimPod("tombstone"); other != "tombstone" {
		t.Error("non-pods must pass through")
	}
}
