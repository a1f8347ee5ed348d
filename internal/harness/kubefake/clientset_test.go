package kubefake

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
)

// TestWaitForWatches: WaitForWatches blocks until an informer opens its
// watch, and a change made after it returns reaches the informer's cache.
func TestWaitForWatches(t *testing.T) {
	client := NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p0"}})

	early, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := client.WaitForWatches(early, "pods"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with no informer running: err=%v, want a deadline", err)
	}

	factory := informers.NewSharedInformerFactory(client, 0)
	lister := factory.Core().V1().Pods().Lister()
	ctx := t.Context()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	if err := client.WaitForWatches(ctx, "pods"); err != nil {
		t.Fatal(err)
	}
	if err := client.WaitForWatches(ctx, "pods"); err != nil {
		t.Fatalf("a second wait: %v", err)
	}
	if err := client.CoreV1().Pods("a").Delete(ctx, "p0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		l, err := lister.List(labels.Everything())
		return len(l) == 0, err
	})
	if err != nil {
		t.Fatalf("the deletion never reached the cache: %v", err)
	}
}
