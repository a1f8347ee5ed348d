package provider_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/gpuscale/gpuscale/internal/harness/kubefake"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/adapter/storesource"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// listed returns the names a Pods list answers, sorted; nil for NotFound.
func listed(t *testing.T, p *provider.Provider, ns string, selector labels.Selector) []string {
	t.Helper()
	list, err := p.GetMetricBySelector(context.Background(), ns, selector, podsInfo(provider.QueueDepth), labels.Everything())
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, it := range list.Items {
		names = append(names, it.DescribedObject.Namespace+"/"+it.DescribedObject.Name)
	}
	sort.Strings(names)
	return names
}

// TestPodListsFollowPodChanges: a provider that reuses its lists of Ready
// pods answers, after every kind of pod change, exactly what a provider
// that lists afresh on every call answers, and between changes it reuses
// the same list.
func TestPodListsFollowPodChanges(t *testing.T) {
	f := newFixture()
	fresh := provider.New(provider.Config{Pods: corelisters.NewPodLister(f.pods), MaxStaleness: 15 * time.Second,
		Values: storesource.New(f.store, 15*time.Second, time.Minute, func() time.Time { return f.now }),
		Now:    func() time.Time { return f.now }}) // no TrackPods: lists every time
	app := map[string]string{"app": "llm"}
	for _, ns := range []string{"ml", "other"} {
		for _, name := range []string{"a", "b", "c", "d"} {
			f.put(ns, name, signal.SourceInference, t0, "m", map[signal.Signal]float64{signal.QueueDepth: 1}, nil)
		}
	}
	steps := []struct {
		name string
		do   func()
		want []string // the answer for ml with app=llm
	}{
		{"start", func() { f.addPod("ml", "a", true, app); f.addPod("ml", "b", true, app) }, []string{"ml/a", "ml/b"}},
		{"added", func() { f.addPod("ml", "c", true, app) }, []string{"ml/a", "ml/b", "ml/c"}},
		{"no longer ready", func() { f.addPod("ml", "b", false, app) }, []string{"ml/a", "ml/c"}},
		{"ready again", func() { f.addPod("ml", "b", true, app) }, []string{"ml/a", "ml/b", "ml/c"}},
		{"relabelled out", func() { f.addPod("ml", "a", true, map[string]string{"app": "x"}) }, []string{"ml/b", "ml/c"}},
		{"deleted from the middle", func() { f.deletePod("ml", "a") }, []string{"ml/b", "ml/c"}},
		{"the pod moved into its place changes", func() { f.addPod("ml", "c", false, app) }, []string{"ml/b"}},
		{"deleted", func() { f.deletePod("ml", "c") }, []string{"ml/b"}},
		{"other namespace", func() { f.addPod("other", "d", true, app) }, []string{"ml/b"}},
		{"all deleted", func() { f.deletePod("ml", "b") }, nil},
		{"back", func() { f.addPod("ml", "d", true, app) }, []string{"ml/d"}},
	}
	for _, st := range steps {
		for _, ns := range []string{"ml", "other", ""} {
			listed(t, f.p, ns, labels.SelectorFromSet(app)) // remember the lists before the change
		}
		st.do()
		if got := listed(t, f.p, "ml", labels.SelectorFromSet(app)); !slices.Equal(got, st.want) {
			t.Errorf("%s: ml lists %v, want %v", st.name, got, st.want)
		}
		for _, ns := range []string{"ml", "other", ""} {
			for _, sel := range []labels.Selector{labels.SelectorFromSet(app), labels.Everything()} {
				if got, want := listed(t, f.p, ns, sel), listed(t, fresh, ns, sel); !slices.Equal(got, want) {
					t.Errorf("%s: namespace %q selector %q lists %v, afresh %v", st.name, ns, sel, got, want)
				}
			}
		}
	}

	first, err := f.p.PodSetFor("ml", labels.SelectorFromSet(app))
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := f.p.PodSetFor("ml", labels.SelectorFromSet(app)); again != first {
		t.Error("no pod changed, yet the list of Ready pods was built again")
	}
	f.addPod("other", "a", true, app)
	if again, _ := f.p.PodSetFor("ml", labels.SelectorFromSet(app)); again != first {
		t.Error("a change in another namespace rebuilt this one's list")
	}
	if all, _ := f.p.PodSetFor("", labels.Everything()); len(all.Pods) != 3 { // ml/d, other/a, other/d
		t.Errorf("all namespaces: %d pods, want 3", len(all.Pods))
	}
}

// TestPodSetMemosSurviveUpdates: a set rebuilt after a pod change that
// left the same Ready pods keeps what was memoised on its predecessor
// (the store source's lookup and quantile memos); a change of the Ready
// pods starts afresh.
func TestPodSetMemosSurviveUpdates(t *testing.T) {
	f := newFixture()
	app := map[string]string{"app": "llm"}
	sel := labels.SelectorFromSet(app)
	for _, name := range []string{"a", "b"} {
		f.addPod("ml", name, true, app)
	}
	key := provider.NewMemoKey[*int]("test")
	builds := 0
	build := func() *int { builds++; v := builds; return &v }
	memo := func() int {
		t.Helper()
		set, err := f.p.PodSetFor("ml", sel)
		if err != nil {
			t.Fatal(err)
		}
		return *provider.Memo(set, key, build)
	}
	memo()
	for _, step := range []struct {
		name      string
		do        func()
		wantBuild int // the memo's value: which build made it
	}{
		{"no change", func() {}, 1},
		{"a pod updated, still Ready", func() { f.addPod("ml", "a", true, app) }, 1},
		{"another label added", func() { f.addPod("ml", "b", true, map[string]string{"app": "llm", "tier": "gold"}) }, 1},
		{"a pod no longer Ready", func() { f.addPod("ml", "a", false, app) }, 2},
		{"ready again", func() { f.addPod("ml", "a", true, app) }, 3},
		{"a pod added", func() { f.addPod("ml", "c", true, app) }, 4},
		{"a pod outside the selector added", func() { f.addPod("ml", "x", true, map[string]string{"app": "other"}) }, 4},
		{"a pod deleted", func() { f.deletePod("ml", "b") }, 5},
	} {
		step.do()
		if got := memo(); got != step.wantBuild {
			t.Errorf("%s: memo from build %d, want %d", step.name, got, step.wantBuild)
		}
	}
}

// TestPodSetsBounded: a namespace keeps at most
// provider.MaxPodSetsPerNamespace sets and all namespaces
// provider.MaxPodSets; past them the sets that pod changes made useless go
// first, then the least recently used (the namespace's own for its bound),
// and the provider keeps answering.
func TestPodSetsBounded(t *testing.T) {
	f := newFixture()
	f.addPod("ml", "a", true, nil)
	f.addPod("other", "a", true, nil)
	hot, _ := f.p.PodSetFor("other", labels.Everything())
	sel := func(key string, i int) labels.Selector {
		return labels.SelectorFromSet(map[string]string{key: fmt.Sprint(i)})
	}
	for i := range 2*provider.MaxPodSetsPerNamespace + 10 {
		if _, err := f.p.PodSetFor("ml", sel("n", i)); err != nil {
			t.Fatal(err)
		}
		if n := f.p.PodSetsKept("ml"); n > provider.MaxPodSetsPerNamespace {
			t.Fatalf("%d sets of one namespace kept, bound %d", n, provider.MaxPodSetsPerNamespace)
		}
	}
	if again, _ := f.p.PodSetFor("other", labels.Everything()); again != hot {
		t.Error("one namespace's selectors evicted another's set")
	}
	// Recently used sets stay; the least recently used go.
	recent, _ := f.p.PodSetFor("ml", sel("n", 2*provider.MaxPodSetsPerNamespace+9))
	_, _ = f.p.PodSetFor("ml", sel("m", 0))
	if again, _ := f.p.PodSetFor("ml", sel("n", 2*provider.MaxPodSetsPerNamespace+9)); again != recent {
		t.Error("a recently used set was evicted")
	}
	// All namespaces together.
	for i := 0; i < provider.MaxPodSets/provider.MaxPodSetsPerNamespace+2; i++ {
		ns := fmt.Sprint("ns-", i)
		f.addPod(ns, "a", true, nil)
		for j := range provider.MaxPodSetsPerNamespace {
			_, _ = f.p.PodSetFor(ns, sel("n", j))
		}
		if n := f.p.PodSetsKept(""); n > provider.MaxPodSets {
			t.Fatalf("%d sets kept, bound %d", n, provider.MaxPodSets)
		}
	}
	// Stale sets go before current ones.
	f.addPod("ml", "b", true, nil) // every set of ml is now stale
	kept, _ := f.p.PodSetFor("ns-0", sel("n", 1))
	for i := range provider.MaxPodSetsPerNamespace {
		_, _ = f.p.PodSetFor("fresh", sel("n", i))
	}
	if again, _ := f.p.PodSetFor("ns-0", sel("n", 1)); again != kept {
		t.Error("a current set was evicted while stale ones could go")
	}
	if n := f.p.PodSetsKept("ml"); n > 1 {
		t.Errorf("%d stale sets of ml kept", n)
	}
}

// TestPodSetsMemoryBounded: a reader flooding one namespace of 10,000
// pods with 1,024 distinct selectors that each match every pod, or with
// selectors of 512 KiB, leaves the heap about where it was: the sets kept
// are bounded in bytes, and long selectors are not kept at all. (1,024
// sets held 281 MiB, and 256 long selectors 130 MiB.)
func TestPodSetsMemoryBounded(t *testing.T) {
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	for _, tc := range []struct {
		name   string
		n      int
		sel    func(i int) labels.Selector
		within int64
	}{
		{"1,024 selectors over 10,000 pods", 1024, func(i int) labels.Selector {
			s, err := labels.Parse(fmt.Sprintf("app=llm,flood notin (v%d)", i))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}, 16 << 20},
		{"16 selectors of 512 KiB", 16, func(i int) labels.Selector {
			var b strings.Builder
			fmt.Fprintf(&b, "app=llm,flood notin (v%d", i)
			for j := 0; b.Len() < 512<<10; j++ {
				fmt.Fprintf(&b, ",x%06d", j)
			}
			b.WriteString(")")
			s, err := labels.Parse(b.String())
			if err != nil {
				t.Fatal(err)
			}
			return s
		}, 4 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			for i := range 10_000 {
				f.addPod("ml", fmt.Sprintf("pod-%05d", i), true, map[string]string{"app": "llm"})
			}
			before := heap()
			for i := range tc.n {
				set, err := f.p.PodSetFor("ml", tc.sel(i))
				if err != nil {
					t.Fatal(err)
				}
				if len(set.Pods) != 10_000 {
					t.Fatalf("%d pods, want 10,000", len(set.Pods))
				}
			}
			grew := int64(heap()) - int64(before)
			runtime.KeepAlive(f) // what the provider keeps, it keeps while it lives
			t.Logf("the heap grew by %d KiB", grew>>10)
			if grew > tc.within {
				t.Errorf("the heap grew by %d KiB, want under %d KiB", grew>>10, tc.within>>10)
			}
		})
	}
}

// TestTrackPodsWithInformer: wired to a real client-go informer, the lists
// follow pods becoming Ready, losing readiness and going away.
func TestTrackPodsWithInformer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := kubefake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	podInf := factory.Core().V1().Pods()
	st := store.New(4)
	now := time.Now()
	p := provider.New(provider.Config{Pods: podInf.Lister(), MaxStaleness: time.Hour, Now: func() time.Time { return now },
		Values: storesource.New(st, time.Hour, time.Minute, func() time.Time { return now })})
	if err := p.TrackPods(podInf.Informer()); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	if err := client.WaitForWatches(ctx, "pods"); err != nil {
		t.Fatal(err)
	}

	pod := func(name string, ready corev1.ConditionStatus) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}}}
	}
	for _, n := range []string{"a", "b"} {
		var smp store.Sample
		smp.Time = now
		smp.Set(signal.QueueDepth, 1)
		st.PutPod(store.Key{Namespace: "ml", Name: n}, signal.SourceInference, smp)
	}
	pods := client.CoreV1().Pods("ml")
	steps := []struct {
		name string
		do   func() error
		want []string
	}{
		{"created", func() error {
			if _, err := pods.Create(ctx, pod("a", corev1.ConditionTrue), metav1.CreateOptions{}); err != nil {
				return err
			}
			_, err := pods.Create(ctx, pod("b", corev1.ConditionFalse), metav1.CreateOptions{})
			return err
		}, []string{"ml/a"}},
		{"b ready", func() error {
			_, err := pods.UpdateStatus(ctx, pod("b", corev1.ConditionTrue), metav1.UpdateOptions{})
			return err
		}, []string{"ml/a", "ml/b"}},
		{"a not ready", func() error {
			_, err := pods.UpdateStatus(ctx, pod("a", corev1.ConditionFalse), metav1.UpdateOptions{})
			return err
		}, []string{"ml/b"}},
		{"b deleted", func() error { return pods.Delete(ctx, "b", metav1.DeleteOptions{}) }, nil},
	}
	for _, s := range steps {
		listed(t, p, "ml", labels.Everything())
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		var got []string
		_ = wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			got = listed(t, p, "ml", labels.Everything())
			return slices.Equal(got, s.want), nil
		})
		if !slices.Equal(got, s.want) {
			t.Errorf("%s: lists %v, want %v", s.name, got, s.want)
		}
	}
}
