package provider_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuscale/gpuscale/pkg/adapter/storesource"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// objectQueue is a Deployment's queue depth as an Object read answers it
// (the sum over its Ready pods), -1 for NotFound.
func objectQueue(t *testing.T, p *provider.Provider, ns, name string) float64 {
	t.Helper()
	mv, err := p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, deploymentsInfo(provider.QueueDepth), labels.Everything())
	if apierrors.IsNotFound(err) {
		return -1
	}
	if err != nil {
		t.Fatalf("%s/%s: %v", ns, name, err)
	}
	return milli(t, &mv.Value)
}

// TestWorkloadReadsFollowPodChanges: with many workloads in one namespace,
// the Object read of each Deployment and the Pods list of each selector
// answer, after every kind of pod change, what a provider that lists the
// informer cache afresh answers, whether or not the change touched the
// pods the workload's selector requires. Every answer is asked for before
// each change, so a set or list kept from before it would show.
func TestWorkloadReadsFollowPodChanges(t *testing.T) {
	f := newFixture()
	fresh := provider.New(provider.Config{Pods: corelisters.NewPodLister(f.pods),
		Deployments: appslisters.NewDeploymentLister(f.deploys), MaxStaleness: 15 * time.Second,
		Values: storesource.New(f.store, 15*time.Second, time.Minute, func() time.Time { return f.now }),
		Now:    func() time.Time { return f.now }}) // no TrackPods: lists every time
	deployment := func(name string, sel map[string]string) {
		_ = f.deploys.Add(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}}})
	}
	// a and b by app; decode by two labels, one of which (role) most
	// pods carry; prefill by a set-based selector that requires no label.
	deployment("a", map[string]string{"app": "a"})
	deployment("b", map[string]string{"app": "b"})
	deployment("decode", map[string]string{"app": "d", "role": "decode"})
	_ = f.deploys.Add(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "prefill"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "role", Operator: metav1.LabelSelectorOpIn, Values: []string{"prefill", "both"}}}}}})
	lbl := func(kv ...string) map[string]string {
		m := map[string]string{"tier": "serving"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for i, name := range []string{"a1", "a2", "b1", "b2", "d1", "d2", "p1", "x1", "x2"} {
		f.put("ml", name, signal.SourceInference, t0, "m", map[signal.Signal]float64{signal.QueueDepth: float64(int(1) << i)}, nil)
	}
	// Pods of other workloads, so that a label's pods are few among the
	// namespace's, as with 1,000 Deployments in one, and are found
	// through the label rather than by a pass over all.
	for i := range 32 {
		f.addPod("ml", fmt.Sprint("filler-", i), true, lbl("app", fmt.Sprint("filler-", i)))
	}
	f.addPod("ml", "a1", true, lbl("app", "a", "pod-template-hash", "1"))
	f.addPod("ml", "b1", true, lbl("app", "b", "pod-template-hash", "1"))
	f.addPod("ml", "d1", true, lbl("app", "d", "role", "decode"))
	f.addPod("ml", "x1", true, lbl("role", "decode")) // another workload's decode pod
	f.addPod("ml", "x2", true, lbl("role", "decode"))
	f.addPod("ml", "p1", true, lbl("role", "prefill"))
	f.addPod("other", "a1", true, lbl("app", "a"))

	steps := []struct {
		name string
		do   func()
		want map[string]float64 // queue depth by Deployment, -1 NotFound
	}{
		{"start", func() {}, map[string]float64{"a": 1, "b": 4, "decode": 16, "prefill": 64}},
		{"added to a", func() { f.addPod("ml", "a2", true, lbl("app", "a", "pod-template-hash", "2")) },
			map[string]float64{"a": 3, "b": 4, "decode": 16, "prefill": 64}},
		{"a pod of a not ready", func() { f.addPod("ml", "a1", false, lbl("app", "a", "pod-template-hash", "1")) },
			map[string]float64{"a": 2, "b": 4, "decode": 16, "prefill": 64}},
		{"ready again", func() { f.addPod("ml", "a1", true, lbl("app", "a", "pod-template-hash", "1")) },
			map[string]float64{"a": 3, "b": 4, "decode": 16, "prefill": 64}},
		{"relabelled from a to b", func() { f.addPod("ml", "a2", true, lbl("app", "b", "pod-template-hash", "2")) },
			map[string]float64{"a": 1, "b": 6, "decode": 16, "prefill": 64}},
		{"only the pod-template-hash changes", func() { f.addPod("ml", "b1", true, lbl("app", "b", "pod-template-hash", "9")) },
			map[string]float64{"a": 1, "b": 6, "decode": 16, "prefill": 64}},
		{"loses its app label", func() { f.addPod("ml", "b1", true, lbl("pod-template-hash", "9")) },
			map[string]float64{"a": 1, "b": 2, "decode": 16, "prefill": 64}},
		{"a decode pod gains app=d", func() { f.addPod("ml", "x1", true, lbl("app", "d", "role", "decode")) },
			map[string]float64{"a": 1, "b": 2, "decode": 144, "prefill": 64}},
		{"an app=d pod loses role=decode", func() { f.addPod("ml", "d1", true, lbl("app", "d", "role", "prefill")) },
			map[string]float64{"a": 1, "b": 2, "decode": 128, "prefill": 80}},
		{"deleted from the middle", func() { f.deletePod("ml", "a1") },
			map[string]float64{"a": -1, "b": 2, "decode": 128, "prefill": 80}},
		{"the pod moved into its slot changes", func() { f.addPod("ml", "p1", false, lbl("role", "prefill")) },
			map[string]float64{"a": -1, "b": 2, "decode": 128, "prefill": 16}},
		{"another namespace", func() { f.addPod("other", "a1", false, lbl("app", "a")) },
			map[string]float64{"a": -1, "b": 2, "decode": 128, "prefill": 16}},
		{"all of a label's pods deleted, then one back", func() {
			f.deletePod("ml", "a2")
			f.addPod("ml", "a2", true, lbl("app", "a", "pod-template-hash", "2"))
		}, map[string]float64{"a": 2, "b": -1, "decode": 128, "prefill": 16}},
		{"every pod deleted", func() {
			for _, n := range []string{"a2", "b1", "d1", "x1", "x2", "p1"} {
				f.deletePod("ml", n)
			}
		}, map[string]float64{"a": -1, "b": -1, "decode": -1, "prefill": -1}},
		{"back", func() { f.addPod("ml", "x2", true, lbl("app", "d", "role", "decode")) },
			map[string]float64{"a": -1, "b": -1, "decode": 256, "prefill": -1}},
	}
	selectors := map[string]labels.Selector{}
	for _, name := range []string{"a", "b", "decode", "prefill"} {
		d, err := appslisters.NewDeploymentLister(f.deploys).Deployments("ml").Get(name)
		if err != nil {
			t.Fatal(err)
		}
		if selectors[name], err = metav1.LabelSelectorAsSelector(d.Spec.Selector); err != nil {
			t.Fatal(err)
		}
	}
	selectors["app=filler-0"] = labels.SelectorFromSet(map[string]string{"app": "filler-0"})
	for _, st := range steps {
		for _, sel := range selectors {
			listed(t, f.p, "ml", sel) // remember the lists before the change
		}
		st.do()
		for name, want := range st.want {
			if got := objectQueue(t, f.p, "ml", name); got != want {
				t.Errorf("%s: deployment %s: queue depth %v, want %v", st.name, name, got, want)
			}
			if got, afresh := objectQueue(t, f.p, "ml", name), objectQueue(t, fresh, "ml", name); got != afresh {
				t.Errorf("%s: deployment %s: queue depth %v, afresh %v", st.name, name, got, afresh)
			}
		}
		for name, sel := range selectors {
			if got, want := listed(t, f.p, "ml", sel), listed(t, fresh, "ml", sel); !slices.Equal(got, want) {
				t.Errorf("%s: selector of %s (%q) lists %v, afresh %v", st.name, name, sel, got, want)
			}
		}
	}
}

// TestUnrelatedChangesKeepSets: a change to pods that do not carry the
// label a selector requires leaves its set as it was, so 1,000 HPAs in
// one namespace do not rebuild each other's sets; a change to one that
// does rebuilds it.
func TestUnrelatedChangesKeepSets(t *testing.T) {
	f := newFixture()
	f.addPod("ml", "a", true, map[string]string{"app": "a"})
	f.addPod("ml", "b", true, map[string]string{"app": "b"})
	sel := labels.SelectorFromSet(map[string]string{"app": "a"})
	first, err := f.p.PodSetFor("ml", sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, change := range []func(){
		func() { f.addPod("ml", "b", false, map[string]string{"app": "b"}) },
		func() { f.addPod("ml", "c", true, map[string]string{"app": "c"}) },
		func() { f.deletePod("ml", "b") },
	} {
		change()
		if again, _ := f.p.PodSetFor("ml", sel); again != first {
			t.Fatal("a change to another workload's pod rebuilt the set")
		}
	}
	f.addPod("ml", "a2", false, map[string]string{"app": "a"}) // not Ready: same pods, yet a change to the label's
	if again, _ := f.p.PodSetFor("ml", sel); again == first {
		t.Error("a pod with the label changed, and the set was not rebuilt")
	}
}

// syncingEvents is an informer whose handler has not yet heard of every
// pod while synced is false.
type syncingEvents struct {
	podEvents
	synced bool
}

func (e *syncingEvents) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	_, _ = e.podEvents.AddEventHandler(h)
	return syncedRegistration{&e.synced}, nil
}

type syncedRegistration struct{ synced *bool }

func (r syncedRegistration) HasSynced() bool { return *r.synced }
func (r syncedRegistration) HasSyncedChecker() cache.DoneChecker {
	panic("not used")
}

// TestNoTablesBeforeTheHandlerSynced: until the pod handler has heard of
// every pod the informer listed, Object reads and Pods lists come from the
// informer cache, not from the provider's own incomplete tables.
func TestNoTablesBeforeTheHandlerSynced(t *testing.T) {
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	deploys := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	f := newFixture()
	p := provider.New(provider.Config{Pods: corelisters.NewPodLister(pods),
		Deployments: appslisters.NewDeploymentLister(deploys), MaxStaleness: 15 * time.Second,
		Values: storesource.New(f.store, 15*time.Second, time.Minute, func() time.Time { return f.now }),
		Now:    func() time.Time { return f.now }})
	events := &syncingEvents{}
	if err := p.TrackPods(events); err != nil {
		t.Fatal(err)
	}
	sel := map[string]string{"app": "a"}
	_ = deploys.Add(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "a"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}}})
	// The informer holds the pod; its handler has not been told yet.
	_ = pods.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "a1", Labels: sel},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}})
	f.put("ml", "a1", signal.SourceInference, t0, "m", map[signal.Signal]float64{signal.QueueDepth: 3}, nil)
	if got := objectQueue(t, p, "ml", "a"); got != 3 {
		t.Errorf("object read before the handler synced: %v, want 3", got)
	}
	if got := listed(t, p, "ml", labels.SelectorFromSet(sel)); !slices.Equal(got, []string{"ml/a1"}) {
		t.Errorf("pods list before the handler synced: %v, want [ml/a1]", got)
	}
	// Once synced, the handler's pods are what is read (here none: it
	// was never told of a1, which shows the tables are read).
	events.synced = true
	if got := objectQueue(t, p, "ml", "a"); got != -1 {
		t.Errorf("object read after the handler synced: %v, want the tables' NotFound", got)
	}
}
