package app

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

func TestScaleDownOptionsValidate(t *testing.T) {
	cases := []struct {
		args []string
		want string // substring of the error; "" for none
	}{
		{nil, ""},
		{[]string{"--scale-down-controller", "--scale-down-resync=1s", "--scale-down-patch-qps=50", "--scale-down-patch-burst=100"}, ""},
		{[]string{"--scale-down-resync=0s"}, "--scale-down-resync"},
		{[]string{"--scale-down-patch-qps=0"}, "--scale-down-patch-qps"},
		{[]string{"--scale-down-patch-burst=0"}, "--scale-down-patch-burst"},
		{[]string{"--scale-down-gpu-utilization-threshold=1.5"}, "threshold"},
		{[]string{"--scale-down-gpu-utilization-threshold=0"}, "threshold"},
		{[]string{"--scale-down-unneeded-time=0s"}, "--scale-down-unneeded-time"},
		{[]string{"--scale-down-idle-time=-1s"}, "--scale-down-idle-time"},
		{[]string{"--scale-down-controller", "--scale-down-lease-namespace="}, "lease-namespace"},
		{[]string{"--scale-down-controller", "--leader-elect-resource-namespace="}, "--leader-elect-resource-namespace"},
		{[]string{"--scale-down-controller", "--leader-elect-resource-lock=configmaps"}, "--leader-elect-resource-lock"},
		{[]string{"--scale-down-controller", "--leader-elect-renew-deadline=20s"}, "--leader-elect-renew-deadline"},
		{[]string{"--scale-down-controller", "--leader-elect=false", "--leader-elect-resource-namespace="}, ""},
	}
	for _, tc := range cases {
		o := NewOptions()
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		o.Complete()
		err := o.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestLeaderElectionHandsOver: of two adapters one runs the controller;
// when it stops, the other takes over, and never both at once.
func TestLeaderElectionHandsOver(t *testing.T) {
	client := fake.NewClientset()
	var running atomic.Int32
	var mu sync.Mutex
	var leaders []string
	start := func(id string) context.CancelFunc {
		ctx, cancel := context.WithCancel(context.Background())
		le := defaultScaleDownOptions().LeaderElection
		lock, err := resourcelock.New(le.ResourceLock, le.ResourceNamespace, le.ResourceName, client.CoreV1(), client.CoordinationV1(),
			resourcelock.ResourceLockConfig{Identity: id})
		if err != nil {
			t.Fatal(err)
		}
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
		go runLeaderElected(ctx, electionConfig(le, lock, nil), run, discardLogger())
		return cancel
	}
	stops := map[string]context.CancelFunc{"a": start("a"), "b": start("b")}
	first := waitLeader(t, &mu, &leaders, 1)
	stops[first]()
	second := waitLeader(t, &mu, &leaders, 2)
	if second == first {
		t.Fatalf("%s led twice, the other never", first)
	}
	for _, stop := range stops {
		stop()
	}
	lease, err := client.CoordinationV1().Leases("gpuscale").Get(context.Background(), scaleDownLease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lease holder %v, transitions %v", ptrVal(lease.Spec.HolderIdentity), ptrVal(lease.Spec.LeaseTransitions))
}

func waitLeader(t *testing.T, mu *sync.Mutex, leaders *[]string, n int) string {
	t.Helper()
	var got string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 3*defaultScaleDownOptions().LeaderElection.LeaseDuration.Duration, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if len(*leaders) >= n {
			got = (*leaders)[n-1]
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no leader #%d: %v", n, err)
	}
	return got
}

func ptrVal[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
