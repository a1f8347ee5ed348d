package podslim

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTransformComposes(t *testing.T) {
	full := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", Annotations: map[string]string{"a/x": "1", "b/y": "2", "c/z": "3"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "img",
			Ports:     []corev1.ContainerPort{{ContainerPort: 8000}},
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, Reason: "r"}}},
	}
	ports := func(full, slim *corev1.Pod) {
		Annotations(full, slim, func(k string) bool { return k == "a/x" })
		Container(slim, "main").Ports = full.Spec.Containers[0].Ports
		Condition(full, slim, corev1.PodReady)
	}
	gpus := func(full, slim *corev1.Pod) {
		Annotations(full, slim, func(k string) bool { return k == "b/y" })
		Container(slim, "main").Resources = full.Spec.Containers[0].Resources
		Condition(full, slim, corev1.PodReady)
	}
	obj, err := Transform(ports, gpus)(full)
	if err != nil {
		t.Fatal(err)
	}
	p := obj.(*corev1.Pod)
	if p.Name != "p" || p.Namespace != "ns" || p.UID != "" || p.ManagedFields != nil {
		t.Errorf("identity: %+v", p.ObjectMeta)
	}
	if len(p.Annotations) != 2 || p.Annotations["a/x"] != "1" || p.Annotations["b/y"] != "2" {
		t.Errorf("annotations = %v", p.Annotations)
	}
	if len(p.Spec.Containers) != 1 || len(p.Spec.Containers[0].Ports) != 1 || p.Spec.Containers[0].Resources.Limits == nil || p.Spec.Containers[0].Image != "" {
		t.Errorf("containers = %+v", p.Spec.Containers)
	}
	if len(p.Status.Conditions) != 1 || p.Status.Conditions[0].Reason != "" {
		t.Errorf("conditions = %+v", p.Status.Conditions)
	}
	if other, _ := Transform(ports)("tombstone"); other != "tombstone" {
		t.Error("non-pods must pass through")
	}
}
