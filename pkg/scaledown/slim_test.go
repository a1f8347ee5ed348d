package scaledown

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// slimWorld is a cluster with every kind of pod the controller reads
// differently, cluttered with fields it never reads.
func slimWorld() []runtime.Object {
	gpus := func(n int64) corev1.ResourceList {
		return corev1.ResourceList{DefaultGPUResource: *resource.NewQuantity(n, resource.DecimalSI), corev1.ResourceCPU: resource.MustParse("2")}
	}
	objs := []runtime.Object{gpuNode("n1", 8), gpuNode("n2", 8), gpuNode("n3", 8)}
	add := func(p *corev1.Pod, mutate ...func(*corev1.Pod)) {
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
		p.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}", "gpuscale.io/scrape": "true"}
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar", Image: "envoy",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}})
		p.Status.PodIP, p.Status.Conditions = "10.0.0.1", []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		for _, m := range mutate {
			m(p)
		}
		objs = append(objs, p)
	}
	for i := range 5 {
		add(pod("ml", fmt.Sprintf("n1-%d", i), "n1", 1, true))
	}
	for i := range 2 {
		add(pod("ml", fmt.Sprintf("n2-%d", i), "n2", 1, true))
	}
	add(pod("ml", "requests-only", "n2", 0, true), func(p *corev1.Pod) { p.Spec.Containers[0].Resources.Requests = gpus(2) })
	add(pod("ml", "init-gpus", "n3", 0, true), func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "warm", Resources: corev1.ResourceRequirements{Limits: gpus(3)}}}
	})
	add(pod("ml", "user-protected", "n3", 1, true), func(p *corev1.Pod) { p.Annotations[SafeToEvictAnnotation] = "false" })
	add(pod("ml", "leaving", "n1", 1, true), func(p *corev1.Pod) { now := metav1.NewTime(t0); p.DeletionTimestamp = &now })
	add(pod("ml", "done", "n1", 1, true), func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded })
	add(pod("other", "unmanaged", "n3", 2, false))
	add(pod("other", "bare", "n2", 0, false), func(p *corev1.Pod) { p.OwnerReferences = nil })
	add(pod("other", "mirror", "n2", 0, false), func(p *corev1.Pod) { p.OwnerReferences = nil; p.Annotations[MirrorPodAnnotation] = "x" })
	return objs
}

// TestControllerOnSlimPods: the controller patches the same annotations
// and reports the same metrics whether its informer holds full pods or
// pods slimmed by KeepPodFields, as the adapter's does.
func TestControllerOnSlimPods(t *testing.T) {
	run := func(keep func(*corev1.Pod, *corev1.Pod)) (map[string]map[string]string, string) {
		f := newSlimFixture(t, Config{IdleTime: time.Minute}, keep, slimWorld()...)
		step := func(d time.Duration, busy bool) {
			f.clock.Step(d)
			for i := range 5 {
				running := 0.0
				if busy && i%2 == 1 {
					running = 1
				}
				f.setLoad("ml", fmt.Sprintf("n1-%d", i), 0, running)
			}
			f.setLoad("ml", "n2-0", 3, 1)
			f.setLoad("ml", "init-gpus", 0, 0)
			f.reconcile()
		}
		step(0, true)
		step(40*time.Second, true)
		step(10*time.Second, false)
		step(70*time.Second, false) // idle for IdleTime: n1's protection is cleared
		annotations := map[string]map[string]string{}
		for _, o := range slimWorld()[3:] {
			p := o.(*corev1.Pod)
			a := maps.Clone(f.annotations(p.Namespace, p.Name))
			delete(a, "kubectl.kubernetes.io/last-applied-configuration")
			annotations[p.Namespace+"/"+p.Name] = a
		}
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(f.ctrl.Collector())
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var metrics strings.Builder
		for _, mf := range mfs {
			if strings.HasSuffix(mf.GetName(), "_timestamp_seconds") {
				continue
			}
			for _, m := range mf.GetMetric() {
				if c := m.GetCounter(); c != nil {
					c.CreatedTimestamp = nil // when the counter was made, not what it counts
				}
			}
			fmt.Fprintln(&metrics, mf.String())
		}
		return annotations, metrics.String()
	}
	fullAnn, fullMetrics := run(nil)
	slimAnn, slimMetrics := run(KeepPodFields(DefaultGPUResource))
	for _, k := range slices.Sorted(maps.Keys(fullAnn)) {
		if !maps.Equal(fullAnn[k], slimAnn[k]) {
			t.Errorf("%s: annotations %v on slim pods, %v on full pods", k, slimAnn[k], fullAnn[k])
		}
	}
	if fullAnn["ml/n2-0"][SafeToEvictAnnotation] != "false" || fullAnn["ml/n1-1"][SafeToEvictAnnotation] != "" ||
		fullAnn["ml/n1-0"][DeletionCostAnnotation] == "" {
		t.Fatalf("the full run did not protect, release and rank: %v", fullAnn)
	}
	if slimMetrics != fullMetrics {
		t.Errorf("metrics on slim pods:\n%s\non full pods:\n%s", slimMetrics, fullMetrics)
	}
}
