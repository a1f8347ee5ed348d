package scaledown

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"

	"github.com/gpuscale/gpuscale/internal/harness/kubefake"
)

// TestLeaderElectionHandsOver: of two adapters one runs the controller;
// when it stops, the other takes over, and never both at once.
func TestLeaderElectionHandsOver(t *testing.T) {
	const ns, lease = "gpuscale", "gpuscale-scale-down"
	// client-go's usual timings, kube-controller-manager's defaults.
	const leaseDuration, renewDeadline, retryPeriod = 15 * time.Second, 10 * time.Second, 2 * time.Second
	client := kubefake.NewClientset()
	var running atomic.Int32
	var mu sync.Mutex
	var leaders []string
	start := func(id string) context.CancelFunc {
		ctx, cancel := context.WithCancel(context.Background())
		lock, err := resourcelock.New(resourcelock.LeasesResourceLock, ns, lease, client.CoreV1(), client.CoordinationV1(),
			resourcelock.ResourceLockConfig{Identity: id})
		if err != nil {
			t.Fatal(err)
		}
		cfg := leaderelection.LeaderElectionConfig{Lock: lock, Name: lease, ReleaseOnCancel: true,
			LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod}
		run := func(ctx context.Context) {
			if running.Add(1) != 1 {
				t.Errorf("%s leads while another does", id)
			}
			mu.Lock()
			leaders = append(leaders, id)
			mu.Unlock()
			<-ctx.Done()
			running.Add(-1)
		}
		go RunLeaderElected(ctx, cfg, run, slog.New(slog.DiscardHandler))
		return cancel
	}
	waitLeader := func(n int) string {
		t.Helper()
		var got string
		err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 3*leaseDuration, true, func(context.Context) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			if len(leaders) >= n {
				got = leaders[n-1]
				return true, nil
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("no leader #%d: %v", n, err)
		}
		return got
	}
	stops := map[string]context.CancelFunc{"a": start("a"), "b": start("b")}
	first := waitLeader(1)
	stops[first]()
	second := waitLeader(2)
	if second == first {
		t.Fatalf("%s led twice, the other never", first)
	}
	for _, stop := range stops {
		stop()
	}
	l, err := client.CoordinationV1().Leases(ns).Get(context.Background(), lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lease transitions %d", ptr.Deref(l.Spec.LeaseTransitions, 0))
}
