package app

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"

	"github.com/gpuscale/gpuscale/internal/harness/kubefake"
)

// TestPodCounter: the PromQL source's namespace sizes follow the pod
// informer: pods added and deleted, per namespace.
func TestPodCounter(t *testing.T) {
	var objs []runtime.Object
	for i := range 5 {
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: fmt.Sprintf("p%d", i)}})
	}
	objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "p0"}})
	client := kubefake.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	pods := factory.Core().V1().Pods()
	c, err := countPods(pods.Informer())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	if err := client.WaitForWatches(ctx, "pods"); err != nil {
		t.Fatal(err)
	}
	expect := func(want map[string]int) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			for ns, n := range want {
				if c.in(ns) != n {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("counts a=%d b=%d c=%d, want %v", c.in("a"), c.in("b"), c.in("c"), want)
		}
	}
	expect(map[string]int{"a": 5, "b": 1, "c": 0})
	if err := client.CoreV1().Pods("a").Delete(ctx, "p3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Pods("b").Delete(ctx, "p0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods("c").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "c", Name: "x"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(map[string]int{"a": 4, "b": 0, "c": 1})
}
