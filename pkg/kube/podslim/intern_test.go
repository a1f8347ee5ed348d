package podslim

import (
	"fmt"
	"hash/maphash"
	"maps"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// templatePod is pod i of a Deployment's template, as the API server
// returns it: every part in memory of its own.
func templatePod(i int, app string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", app, i), Namespace: "ml",
			Labels:          map[string]string{"app": app, "pod-template-hash": "5d8f7c9b6"},
			Annotations:     map[string]string{"gpuscale.io/port": "8000", "kubectl.kubernetes.io/restartedAt": "x"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-5d8f7c9b6", UID: "rs"}}},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", i), Containers: []corev1.Container{{Name: "vllm", Image: "vllm",
			Ports:     []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}},
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}},
		Status: corev1.PodStatus{PodIP: fmt.Sprintf("10.0.0.%d", i), Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Unix(int64(i), 0)}}},
	}
}

// keepAll keeps every part that is shared, and some that are not.
func keepAll(full, slim *corev1.Pod) {
	slim.Labels = full.Labels
	slim.OwnerReferences = full.OwnerReferences
	slim.Spec.NodeName = full.Spec.NodeName
	slim.Status.PodIP = full.Status.PodIP
	Annotations(full, slim, func(k string) bool { return k == "gpuscale.io/port" })
	Container(slim, "vllm").Ports = full.Spec.Containers[0].Ports
	Container(slim, "vllm").Resources = full.Spec.Containers[0].Resources
	Condition(full, slim, corev1.PodReady)
}

// unshared is what Slim gave before it shared parts.
func unshared(p *corev1.Pod) *corev1.Pod {
	out := Identity(p)
	keepAll(p, out)
	return out
}

func mapPtr(m map[string]string) uintptr { return reflect.ValueOf(m).Pointer() }

// TestSlimSharesTemplateParts: two pods of one template get the same
// labels, annotations, owner and containers in memory, pods of another
// template their own, and every slim pod equals what it was without
// sharing.
func TestSlimSharesTemplateParts(t *testing.T) {
	a0, a1, b0 := Slim(templatePod(0, "a"), keepAll), Slim(templatePod(1, "a"), keepAll), Slim(templatePod(0, "b"), keepAll)
	for _, tc := range []struct {
		name string
		full *corev1.Pod
		slim *corev1.Pod
	}{{"a0", templatePod(0, "a"), a0}, {"a1", templatePod(1, "a"), a1}, {"b0", templatePod(0, "b"), b0}} {
		if want := unshared(tc.full); !reflect.DeepEqual(tc.slim, want) {
			t.Errorf("%s: slim pod %+v, want %+v", tc.name, tc.slim, want)
		}
	}
	same := []struct {
		part       string
		a0, a1, b0 uintptr
	}{
		{"labels", mapPtr(a0.Labels), mapPtr(a1.Labels), mapPtr(b0.Labels)},
		{"annotations", mapPtr(a0.Annotations), mapPtr(a1.Annotations), mapPtr(b0.Annotations)},
		{"owners", uintptr(reflect.ValueOf(a0.OwnerReferences).Pointer()), uintptr(reflect.ValueOf(a1.OwnerReferences).Pointer()), uintptr(reflect.ValueOf(b0.OwnerReferences).Pointer())},
		{"containers", uintptr(reflect.ValueOf(a0.Spec.Containers).Pointer()), uintptr(reflect.ValueOf(a1.Spec.Containers).Pointer()), uintptr(reflect.ValueOf(b0.Spec.Containers).Pointer())},
	}
	for _, s := range same {
		if s.a0 != s.a1 {
			t.Errorf("%s: two pods of one template have their own", s.part)
		}
	}
	// Template b's annotations and containers equal a's: shared too.
	// Its labels and owner differ.
	if same[0].b0 == same[0].a0 || same[2].b0 == same[2].a0 {
		t.Error("pods of two templates share labels or owners that differ")
	}
	if &a0.Status.Conditions[0] == &a1.Status.Conditions[0] {
		t.Error("conditions, each pod's own, are shared")
	}
}

// TestInternedCollision: parts whose hashes collide but differ are not
// shared.
func TestInternedCollision(t *testing.T) {
	in := newInterned(func(*maphash.Hash, map[string]string) {}, maps.Equal[map[string]string])
	x, y := map[string]string{"app": "x"}, map[string]string{"app": "y"}
	if got := in.share(x); mapPtr(got) != mapPtr(x) {
		t.Fatal("the first part is not kept")
	}
	if got := in.share(y); mapPtr(got) != mapPtr(y) || got["app"] != "y" {
		t.Fatalf("a colliding part got %v", got)
	}
	if got := in.share(map[string]string{"app": "x"}); mapPtr(got) != mapPtr(x) {
		t.Fatal("an equal part is not shared")
	}
}

// TestInternedBounded: pods whose parts are all different leave at most
// maxInterned of each kind remembered.
func TestInternedBounded(t *testing.T) {
	in := newInterned(hashStrings, maps.Equal[map[string]string])
	for i := range 3 * maxInterned {
		in.share(map[string]string{"pod": fmt.Sprint(i)})
	}
	if n := in.cache.Len(); n > maxInterned {
		t.Fatalf("%d parts remembered, bound %d", n, maxInterned)
	}
}
