package app

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscale/gpuscale/pkg/adapter/gather"
	"github.com/gpuscale/gpuscale/pkg/kube/podslim"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/scaledown"
)

// TestPodTransformComposes: whatever the flags, the composed transform
// loses nothing any running reader keeps for itself: each reader's Keep
// finds in the slim pod what it finds in the full one. (Each reader's
// package tests that its Keep is enough for it, on slim and full pods.)
func TestPodTransformComposes(t *testing.T) {
	gpu := func(n int64) corev1.ResourceList {
		return corev1.ResourceList{scaledown.DefaultGPUResource: *resource.NewQuantity(n, resource.DecimalSI), corev1.ResourceCPU: resource.MustParse("4")}
	}
	now := metav1.Now()
	full := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-p", ResourceVersion: "7",
			Labels: map[string]string{"app": "llm", scaledown.ManagedLabel: scaledown.ManagedValue},
			Annotations: map[string]string{"gpuscale.io/scrape": "true", "prometheus.io/path": "/m", scaledown.DeletionCostAnnotation: "3",
				scaledown.ProtectedAnnotation: "true", "kubectl.kubernetes.io/last-applied-configuration": "{huge}"},
			ManagedFields:     []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
			OwnerReferences:   []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs"}},
			DeletionTimestamp: &now},
		Spec: corev1.PodSpec{NodeName: "n1", HostNetwork: true,
			InitContainers: []corev1.Container{{Name: "warm", Resources: corev1.ResourceRequirements{Limits: gpu(2)}}},
			Containers: []corev1.Container{
				{Name: "vllm", Image: "vllm/vllm-openai", Ports: []corev1.ContainerPort{{ContainerPort: 8000}}, Resources: corev1.ResourceRequirements{Requests: gpu(1)}},
				{Name: "sidecar", Image: "envoy", Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue, Reason: "x"}}},
	}
	readers := map[string]podslim.Keep{"provider": provider.KeepPodFields, "gather": gather.KeepPodFields,
		"scaledown": scaledown.KeepPodFields(scaledown.DefaultGPUResource)}
	for _, tc := range []struct {
		name    string
		set     func(*Options)
		readers []string
	}{
		{"embedded", func(*Options) {}, []string{"provider", "gather"}},
		{"embedded with scale-down", func(o *Options) { o.ScaleDown.Enabled = true }, []string{"provider", "gather", "scaledown"}},
		{"prometheus with scale-down", func(o *Options) { o.Source, o.ScaleDown.Enabled = SourcePrometheus, true }, []string{"provider", "scaledown"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			tc.set(o)
			obj, err := o.podTransform()(full)
			if err != nil {
				t.Fatal(err)
			}
			slim := obj.(*corev1.Pod)
			for _, r := range tc.readers {
				if got, want := podslim.Slim(slim, readers[r]), podslim.Slim(full, readers[r]); !equality.Semantic.DeepEqual(got, want) {
					t.Errorf("%s reads %+v of the slim pod, %+v of the full one", r, got, want)
				}
			}
			if slim.ManagedFields != nil || slim.Annotations["kubectl.kubernetes.io/last-applied-configuration"] != "" || slim.Spec.Containers[0].Image != "" {
				t.Errorf("kept what no reader reads: %+v", slim)
			}
		})
	}
	if other, _ := NewOptions().podTransform()("tombstone"); other != "tombstone" {
		t.Error("non-pods must pass through")
	}
}
