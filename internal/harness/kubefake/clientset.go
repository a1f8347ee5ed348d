// Package kubefake is a clientset for unit tests that serves the API groups
// gpuscale's controllers call, core/v1 and coordination/v1, from an object
// tracker, as client-go's kubernetes/fake does for every group.
//
// kubernetes/fake links the typed fake client of every API group (57
// packages) into each test binary, and so into the race build of every
// package whose tests use it. Code under test takes a kubernetes.Interface
// as in production, and informers built on this clientset work as on
// kubernetes/fake's; calling a group this clientset does not serve panics
// (a nil interface).
package kubefake

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	fakecoordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1/fake"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	fakecorev1 "k8s.io/client-go/kubernetes/typed/core/v1/fake"
	clienttesting "k8s.io/client-go/testing"
)

// Clientset serves core/v1 and coordination/v1 from its tracker. Its Fake
// records actions and takes reactors, as kubernetes/fake's does.
type Clientset struct {
	// unserved makes Clientset a kubernetes.Interface; it is nil, so a
	// group not served here panics when called.
	unserved
	clienttesting.Fake
	tracker clienttesting.ObjectTracker

	mu       sync.Mutex
	watching map[string]chan struct{} // by resource; closed at its first watch
}

type unserved = kubernetes.Interface

var _ kubernetes.Interface = (*Clientset)(nil)

// NewClientset returns a clientset holding objects. Like kubernetes/fake's
// NewSimpleClientset, it applies no validation or defaults, and does not
// serve server-side apply.
func NewClientset(objects ...runtime.Object) *Clientset {
	tracker := clienttesting.NewObjectTracker(scheme.Scheme, scheme.Codecs.UniversalDecoder())
	for _, obj := range objects {
		if err := tracker.Add(obj); err != nil {
			panic(err)
		}
	}
	c := &Clientset{tracker: tracker, watching: map[string]chan struct{}{}}
	c.AddReactor("*", "*", clienttesting.ObjectReaction(tracker))
	c.AddWatchReactor("*", func(action clienttesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if w, ok := action.(clienttesting.WatchActionImpl); ok {
			opts = w.ListOptions
		}
		w, err := tracker.Watch(action.GetResource(), action.GetNamespace(), opts)
		if err != nil {
			return false, nil, err
		}
		c.watchOpened(action.GetResource().Resource)
		return true, w, nil
	})
	return c
}

// watchOpened closes resource's channel at its first watch.
func (c *Clientset) watchOpened(resource string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.channel(resource)
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// channel is resource's channel, made on first use; c.mu is held.
func (c *Clientset) channel(resource string) chan struct{} {
	ch, ok := c.watching[resource]
	if !ok {
		ch = make(chan struct{})
		c.watching[resource] = ch
	}
	return ch
}

// WaitForWatches returns once a watch is open on each resource ("pods",
// "nodes"), or ctx's error. An informer lists, then watches; the tracker
// does not replay what changed between the two, so a test that changes
// objects after WaitForCacheSync but before the watch opens loses those
// changes. Call it after WaitForCacheSync, before the first change.
func (c *Clientset) WaitForWatches(ctx context.Context, resources ...string) error {
	for _, r := range resources {
		c.mu.Lock()
		ch := c.channel(r)
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("no watch on %s: %w", r, ctx.Err())
		}
	}
	return nil
}

// Tracker is the object store behind the clientset.
func (c *Clientset) Tracker() clienttesting.ObjectTracker { return c.tracker }

// CoreV1 serves core/v1 from the tracker.
func (c *Clientset) CoreV1() corev1.CoreV1Interface { return &fakecorev1.FakeCoreV1{Fake: &c.Fake} }

// CoordinationV1 serves coordination/v1 (leader election's Leases) from
// the tracker.
func (c *Clientset) CoordinationV1() coordinationv1.CoordinationV1Interface {
	return &fakecoordinationv1.FakeCoordinationV1{Fake: &c.Fake}
}

// IsWatchListSemanticsUnSupported tells client-go's reflector, as
// kubernetes/fake does, that the tracker's watches do not implement
// watch-list (streaming lists): informers list, then watch.
func (c *Clientset) IsWatchListSemanticsUnSupported() bool { return true }
