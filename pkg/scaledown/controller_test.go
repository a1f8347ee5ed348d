package scaledown

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"

	"github.com/gpuscale/gpuscale/pkg/adapter/storesource"
	"github.com/gpuscale/gpuscale/pkg/provider"
)

// nodesWith returns a node per entry holding that many one-GPU pods, all
// managed, named <node>-<i>.
func nodesWith(counts map[string]int) []runtime.Object {
	var objs []runtime.Object
	for n, k := range counts {
		objs = append(objs, gpuNode(n, 8))
		for i := range k {
			objs = append(objs, pod("ns", fmt.Sprintf("%s-%d", n, i), n, 1, true))
		}
	}
	return objs
}

// TestCostOrdering: nodes holding fewer GPU pods rank lower; equal nodes
// are tie-broken by name without interleaving; unmanaged GPU pods count.
func TestCostOrdering(t *testing.T) {
	cases := []struct {
		name   string
		counts map[string]int
		extra  []runtime.Object // unmanaged pods that count towards a node
		want   []string         // nodes, from the first emptied to the last
	}{
		{"2,4,6 pods", map[string]int{"a": 6, "b": 2, "c": 4}, nil, []string{"b", "c", "a"}},
		{"equal nodes by name", map[string]int{"z": 3, "m": 3, "a": 3}, nil, []string{"a", "m", "z"}},
		{"unmanaged GPU pods count", map[string]int{"a": 2, "b": 3},
			[]runtime.Object{pod("other", "u1", "a", 1, false), pod("other", "u2", "a", 1, false)}, []string{"b", "a"}},
		{"CPU-only pods do not count", map[string]int{"a": 2, "b": 3},
			[]runtime.Object{pod("other", "c1", "b", 0, false), pod("other", "c2", "b", 0, false)}, []string{"a", "b"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{}, append(nodesWith(tc.counts), tc.extra...)...)
			if res := f.reconcile(); res.Failed != 0 || res.RateLimited != 0 {
				t.Fatalf("reconcile: %+v", res)
			}
			prevMax := -1
			for _, n := range tc.want {
				lo, hi := 1<<30, -1
				for i := range tc.counts[n] {
					c := f.cost("ns", fmt.Sprintf("%s-%d", n, i))
					lo, hi = min(lo, c), max(hi, c)
				}
				if lo <= prevMax {
					t.Errorf("node %s: lowest cost %d not above the previous node's highest %d (interleaved)", n, lo, prevMax)
				}
				prevMax = hi
			}
			for _, o := range tc.extra {
				p := o.(*corev1.Pod)
				if a := f.annotations(p.Namespace, p.Name); len(a) != 0 {
					t.Errorf("unmanaged pod %s/%s got annotations %v", p.Namespace, p.Name, a)
				}
			}
		})
	}
}

// TestCostWithinNodeIdlestFirst: within a node, lower load ranks lower
// (on a base-4 log scale), unknown load last, ties by name.
func TestCostWithinNodeIdlestFirst(t *testing.T) {
	objs := []runtime.Object{gpuNode("n", 8)}
	for _, name := range []string{"busy", "idle", "one", "unknown", "six", "five"} {
		objs = append(objs, pod("ns", name, "n", 1, true))
	}
	f := newFixture(t, Config{}, objs...)
	f.setLoad("ns", "busy", 10, 8)
	f.setLoad("ns", "idle", 0, 0)
	f.setLoad("ns", "one", 0, 1)
	f.setLoad("ns", "six", 2, 4) // 4-15 share a bucket: ordered by name
	f.setLoad("ns", "five", 5, 0)
	f.reconcile()
	want := []string{"idle", "one", "five", "six", "busy", "unknown"}
	var got []string
	costs := map[string]int{}
	for _, n := range want {
		costs[n] = f.cost("ns", n)
		got = append(got, n)
	}
	slices.SortStableFunc(got, func(a, b string) int { return costs[a] - costs[b] })
	if !slices.Equal(got, want) {
		t.Errorf("order by cost = %v (costs %v), want %v", got, costs, want)
	}
}

// TestPatchOnlyOnChange: a second reconcile with nothing changed sends no
// patch; a load change that reorders a node patches only the pod whose
// load moved, not its neighbours.
func TestPatchOnlyOnChange(t *testing.T) {
	f := newFixture(t, Config{}, nodesWith(map[string]int{"a": 2, "b": 3})...)
	for _, n := range []string{"a-0", "a-1", "b-0", "b-1", "b-2"} {
		f.setLoad("ns", n, 0, 1)
	}
	if res := f.reconcile(); res.Patched != 5 {
		t.Fatalf("first reconcile: %+v, want 5 patches", res)
	}
	f.patches()
	f.clock.Step(time.Second)
	for _, n := range []string{"a-0", "a-1", "b-0", "b-1", "b-2"} {
		f.setLoad("ns", n, 0, 1)
	}
	if res := f.reconcile(); res.Wanted != 0 || len(f.patches()) != 0 {
		t.Fatalf("unchanged: %+v, want no patch", res)
	}
	// Before the cache shows a patch, a reconcile must not send it again.
	f.clock.Step(time.Second)
	for _, n := range []string{"a-0", "a-1", "b-0", "b-1"} {
		f.setLoad("ns", n, 0, 1)
	}
	f.setLoad("ns", "b-2", 0, 0) // now the idlest of b
	before := f.cost("ns", "b-0")
	res := f.ctrl.Reconcile(context.Background())
	again := f.ctrl.Reconcile(context.Background()) // the informer may lag
	f.settle()
	got := f.patches()
	if f.cost("ns", "b-2") >= before {
		t.Errorf("idle b-2 (cost %d) does not rank below b-0 (%d)", f.cost("ns", "b-2"), before)
	}
	if want := []string{"ns/b-2"}; !slices.Equal(got, want) || res.Patched != 1 || again.Wanted != 0 {
		t.Errorf("patched %v (%+v, then %+v), want %v once", got, res, again, want)
	}
}

// TestRateLimitUnderChurn: whatever the churn, patches never exceed the
// token bucket, and the most urgent go first.
func TestRateLimitUnderChurn(t *testing.T) {
	const qps, burst = 2, 5
	counts := map[string]int{}
	for i := range 8 {
		counts[fmt.Sprintf("n%d", i)] = 4
	}
	f := newFixture(t, Config{PatchQPS: qps, PatchBurst: burst}, nodesWith(counts)...)
	res := f.reconcile()
	if res.Patched != burst || res.RateLimited != 32-burst || res.RequeueAfter != time.Second/qps {
		t.Fatalf("first reconcile: %+v, want %d patched, %d rate limited, requeue after %v", res, burst, 32-burst, time.Second/qps)
	}
	// The first patches are the lowest costs: the next pods to go.
	for _, n := range []string{"n0-0", "n0-1", "n0-2", "n0-3", "n1-0"} {
		if _, ok := f.annotations("ns", n)[DeletionCostAnnotation]; !ok {
			t.Errorf("%s not among the first patches", n)
		}
	}
	// A backlog retried before a token is back is counted once.
	if again := f.reconcile(); again.Patched != 0 || again.RateLimited != 32-burst {
		t.Fatalf("retry without tokens: %+v", again)
	}
	if n := testutilCounter(t, f.ctrl, "gpuscale_scaledown_patch_rate_limited_total", nil); n != 32-burst {
		t.Errorf("rate_limited_total = %v after the same backlog twice, want %d", n, 32-burst)
	}
	if n := testutilCounter(t, f.ctrl, "gpuscale_scaledown_patch_backlog", nil); n != 32-burst {
		t.Errorf("patch_backlog = %v, want %d", n, 32-burst)
	}
	total := len(f.patches())
	const seconds = 30
	for s := 1; s <= seconds; s++ {
		f.clock.Step(time.Second)
		for n, k := range counts {
			for i := range k {
				f.setLoad("ns", fmt.Sprintf("%s-%d", n, i), float64((s*7+i*3)%11), 0)
			}
		}
		f.reconcile()
		total += len(f.patches())
	}
	t.Logf("%d patches in %ds (qps %d, burst %d)", total, seconds, qps, burst)
	if limit := burst + qps*seconds; total > limit {
		t.Errorf("%d patches in %ds, the bucket allows %d", total, seconds, limit)
	}
	if total < qps*seconds {
		t.Errorf("%d patches in %ds: the churn should have used the whole rate", total, seconds)
	}
	if rl := testutilCounter(t, f.ctrl, "gpuscale_scaledown_patch_rate_limited_total", nil); rl <= 32-burst {
		t.Errorf("rate_limited_total = %v: the churn's deferred patches not counted", rl)
	}
}

// TestProtection: serving replicas get safe-to-evict=false; it is cleared
// after IdleTime of idleness; unknown load changes nothing; a user's own
// safe-to-evict is left alone.
func TestProtection(t *testing.T) {
	user := pod("ns", "user", "n", 1, true)
	user.Annotations = map[string]string{SafeToEvictAnnotation: "false"}
	f := newFixture(t, Config{IdleTime: time.Minute}, gpuNode("n", 8), pod("ns", "serving", "n", 1, true),
		pod("ns", "idle", "n", 1, true), pod("ns", "unknown", "n", 1, true), user)
	step := func(d time.Duration, servingLoad float64, fresh bool) {
		f.clock.Step(d)
		if fresh {
			f.setLoad("ns", "serving", 0, servingLoad)
		}
		f.setLoad("ns", "idle", 0, 0)
		f.setLoad("ns", "user", 0, 0)
		f.reconcile()
	}
	protected := func(name string) bool {
		a := f.annotations("ns", name)
		return a[SafeToEvictAnnotation] == "false"
	}
	check := func(when string, want map[string]bool) {
		t.Helper()
		for name, w := range want {
			if got := protected(name); got != w {
				t.Errorf("%s: %s protected = %v, want %v", when, name, got, w)
			}
		}
	}
	step(0, 3, true)
	check("serving", map[string]bool{"serving": true, "idle": false, "unknown": false, "user": true})
	step(30*time.Second, 0, true)
	check("idle 0s", map[string]bool{"serving": true})
	step(40*time.Second, 0, true)
	check("idle 40s", map[string]bool{"serving": true})
	step(20*time.Second, 0, false) // no fresh sample: unknown is not idle
	check("unknown", map[string]bool{"serving": true})
	step(time.Second, 0, true) // idle again: the idle clock restarts
	check("idle again 0s", map[string]bool{"serving": true})
	step(time.Minute, 0, true)
	check("idle 60s", map[string]bool{"serving": false, "user": true})
	if a := f.annotations("ns", "serving"); a[ProtectedAnnotation] != "" {
		t.Errorf("marker left behind: %v", a)
	}
	if a := f.annotations("ns", "user"); a[ProtectedAnnotation] != "" || a[SafeToEvictAnnotation] != "false" {
		t.Errorf("user's safe-to-evict touched: %v", a)
	}
}

// flakyLoads is the store's loads, or an error while failing is set.
type flakyLoads struct {
	Loads
	failing bool
}

func (l *flakyLoads) Pods(ctx context.Context, set *provider.PodSet, m provider.Metric, sel labels.Selector) ([]provider.Value, error) {
	if l.failing {
		return nil, errors.New("prometheus: connection refused")
	}
	return l.Loads.Pods(ctx, set, m, sel)
}

// TestLoadErrorsLeaveProtection: when the source cannot say how busy pods
// are, the error is counted and their load is unknown: a serving replica
// keeps its protection however long the source stays down.
func TestLoadErrorsLeaveProtection(t *testing.T) {
	loads := &flakyLoads{}
	f := newFixture(t, Config{IdleTime: time.Minute, Loads: loads}, gpuNode("n", 8), pod("ns", "serving", "n", 1, true))
	loads.Loads = storesource.New(f.store, staleness, time.Minute, f.clock.Now)
	f.setLoad("ns", "serving", 0, 2)
	f.reconcile()
	if a := f.annotations("ns", "serving"); a[SafeToEvictAnnotation] != "false" {
		t.Fatalf("serving replica not protected: %v", a)
	}
	loads.failing = true
	for range 3 {
		f.clock.Step(time.Minute)
		f.setLoad("ns", "serving", 0, 0) // idle, but the source cannot tell
		f.reconcile()
	}
	if a := f.annotations("ns", "serving"); a[SafeToEvictAnnotation] != "false" {
		t.Errorf("protection cleared while loads were unreadable: %v", a)
	}
	if n := testutilCounter(t, f.ctrl, "gpuscale_scaledown_load_errors_total", nil); n != 6 {
		t.Errorf("load errors = %v, want 6 (two metrics, three reconciles)", n)
	}
	loads.failing = false
	f.clock.Step(time.Minute)
	f.setLoad("ns", "serving", 0, 0)
	f.reconcile() // idle from now on
	f.clock.Step(time.Minute)
	f.setLoad("ns", "serving", 0, 0)
	f.reconcile()
	if a := f.annotations("ns", "serving"); a[SafeToEvictAnnotation] == "false" {
		t.Errorf("protection kept after a minute idle with loads readable again: %v", a)
	}
}

// TestAPIErrorsRetried: failed patches (conflicts, server errors, a pod
// deleted meanwhile) are counted and retried by a later reconcile.
func TestAPIErrorsRetried(t *testing.T) {
	f := newFixture(t, Config{}, nodesWith(map[string]int{"a": 3})...)
	errs := []error{
		apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "a-0", fmt.Errorf("uid precondition")),
		apierrors.NewInternalError(fmt.Errorf("etcd is down")),
		apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "a-2"),
	}
	f.client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if len(errs) == 0 {
			return false, nil, nil
		}
		err := errs[0]
		errs = errs[1:]
		return true, nil, err
	})
	res := f.reconcile()
	if res.Failed != 3 || res.Patched != 0 || res.RequeueAfter != retryAfter {
		t.Fatalf("failing reconcile: %+v", res)
	}
	for _, r := range []string{"conflict", "error", "not_found"} {
		if n := testutilCounter(t, f.ctrl, "gpuscale_scaledown_patches_total", map[string]string{"kind": kindDeletionCost, "result": r}); n != 1 {
			t.Errorf("patches_total{result=%s} = %v, want 1", r, n)
		}
	}
	if res := f.reconcile(); res.Patched != 3 || res.Failed != 0 {
		t.Fatalf("retry: %+v, want 3 patched", res)
	}
}

// TestRunReconcilesOnEvents: Run reacts to a new pod without waiting for
// the resync, and stops with its context.
func TestRunReconcilesOnEvents(t *testing.T) {
	f := newFixture(t, Config{Resync: time.Hour, Debounce: 10 * time.Millisecond}, gpuNode("n", 8))
	f.ctrl.cfg.Clock = clock.RealClock{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.ctrl.Run(ctx); close(done) }()
	if _, err := f.client.CoreV1().Pods("ns").Create(ctx, pod("ns", "new", "n", 1, true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := f.client.CoreV1().Pods("ns").Get(ctx, "new", metav1.GetOptions{})
		return err == nil && p.Annotations[DeletionCostAnnotation] != "", nil
	})
	if err != nil {
		t.Fatalf("no deletion cost after a pod event: %v", err)
	}
	if !f.ctrl.leading.Load() {
		t.Error("not leading while running")
	}
	cancel()
	<-done
	if f.ctrl.leading.Load() {
		t.Error("still leading after Run returned")
	}
}
