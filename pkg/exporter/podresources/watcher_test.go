package podresources

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// shuffle reorders pods, containers, devices and device IDs in place, the
// way an unordered kubelet listing could.
func shuffle(r *rand.Rand, pods []*podresourcesv1.PodResources) {
	r.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
	for _, p := range pods {
		r.Shuffle(len(p.Containers), func(i, j int) { p.Containers[i], p.Containers[j] = p.Containers[j], p.Containers[i] })
		for _, c := range p.Containers {
			r.Shuffle(len(c.Devices), func(i, j int) { c.Devices[i], c.Devices[j] = c.Devices[j], c.Devices[i] })
			for _, d := range c.Devices {
				r.Shuffle(len(d.DeviceIds), func(i, j int) { d.DeviceIds[i], d.DeviceIds[j] = d.DeviceIds[j], d.DeviceIds[i] })
			}
		}
	}
}

func TestRefreshAssignments(t *testing.T) {
	tests := []struct {
		name string
		// pods builds a fresh response, so that shuffling cannot leak
		// between runs.
		pods func() []*podresourcesv1.PodResources
		want Assignments
	}{{
		name: "exclusive",
		pods: func() []*podresourcesv1.PodResources {
			return []*podresourcesv1.PodResources{
				pod("default", "a", ctr("main", dev("nvidia.com/gpu", "GPU-1")), ctr("sidecar")),
				pod("ml", "b", ctr("trainer", dev("nvidia.com/gpu", "GPU-2"))),
			}
		},
		want: Assignments{
			"GPU-1": {{Namespace: "default", Pod: "a", Container: "main"}},
			"GPU-2": {{Namespace: "ml", Pod: "b", Container: "trainer"}},
		},
	}, {
		name: "MIG",
		pods: func() []*podresourcesv1.PodResources {
			return []*podresourcesv1.PodResources{
				pod("ml", "small", ctr("main", dev("nvidia.com/mig-1g.10gb", "MIG-aaa", "MIG-bbb"))),
				pod("ml", "big", ctr("main", dev("nvidia.com/mig-3g.40gb", "MIG-ccc"))),
			}
		},
		want: Assignments{
			"MIG-aaa": {{Namespace: "ml", Pod: "small", Container: "main"}},
			"MIG-bbb": {{Namespace: "ml", Pod: "small", Container: "main"}},
			"MIG-ccc": {{Namespace: "ml", Pod: "big", Container: "main"}},
		},
	}, {
		name: "time-sliced",
		pods: func() []*podresourcesv1.PodResources {
			return []*podresourcesv1.PodResources{
				pod("ml", "b", ctr("main", dev("nvidia.com/gpu", "GPU-a::1"))),
				pod("default", "c", ctr("main", dev("nvidia.com/gpu", "GPU-a::2", "GPU-a::3"))),
				pod("default", "a", ctr("main", dev("nvidia.com/gpu", "GPU-a::0"))),
				pod("team", "d", ctr("main", dev("nvidia.com/gpu.shared", "GPU-b::0"))),
			}
		},
		want: Assignments{
			"GPU-a": {
				{Namespace: "default", Pod: "a", Container: "main"},
				{Namespace: "default", Pod: "c", Container: "main"},
				{Namespace: "ml", Pod: "b", Container: "main"},
			},
			"GPU-b": {{Namespace: "team", Pod: "d", Container: "main"}},
		},
	}, {
		name: "unallocated and unrelated resources",
		pods: func() []*podresourcesv1.PodResources {
			return []*podresourcesv1.PodResources{
				pod("default", "foo", ctr("main", dev("example.com/foo", "foo-1", "GPU-x"))),
				pod("default", "cpu", &podresourcesv1.ContainerResources{Name: "main", CpuIds: []int64{1, 2}}),
				pod("default", "mixed", ctr("main", dev("example.com/foo", "foo-2"), dev("nvidia.com/gpu", "GPU-1"))),
				pod("default", "lookalike", ctr("main", dev("nvidia.com/gpux", "GPU-y"))),
			}
		},
		// GPU-z is on the node but held by nobody; it must not appear.
		want: Assignments{
			"GPU-1": {{Namespace: "default", Pod: "mixed", Container: "main"}},
		},
	}, {
		name: "empty",
		pods: func() []*podresourcesv1.PodResources { return nil },
		want: Assignments{},
	}}

	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			socket := socketPath(t)
			kubelet := newFakeKubelet()
			serve(t, socket, kubelet)
			w := newTestWatcher(t, socket, nil)

			// Several shuffled runs must all give the same, sorted result.
			for seed := range uint64(8) {
				pods := tc.pods()
				if seed > 0 {
					shuffle(rand.New(rand.NewPCG(seed, seed)), pods)
				}
				kubelet.setPods(pods...)
				if err := w.Refresh(t.Context()); err != nil {
					t.Fatalf("seed %d: Refresh: %v", seed, err)
				}
				if got := w.Assignments(); !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("seed %d: Assignments() = %v, want %v", seed, got, tc.want)
				}
			}
			if s := w.Stats(); s.Successes != 8 || s.Failures != 0 || s.LastSuccess.IsZero() {
				t.Errorf("Stats() = %+v, want 8 successes and no failures", s)
			}
		})
	}
}

func TestRefreshSocketGone(t *testing.T) {
	socket := socketPath(t)
	stop := serve(t, socket, newFakeKubelet(pod("default", "a", ctr("main", dev("nvidia.com/gpu", "GPU-1")))))
	clock := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	w := newTestWatcher(t, socket, func(o *Options) { o.MaxAge = 30 * time.Second })
	w.now = clock.Now

	if err := w.Refresh(t.Context()); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	want := w.Assignments()
	if len(want) != 1 {
		t.Fatalf("Assignments() = %v, want one GPU", want)
	}

	stop()
	err := w.Refresh(t.Context())
	if err == nil {
		t.Fatal("Refresh succeeded with the socket gone")
	}
	if !strings.Contains(err.Error(), socket) {
		t.Errorf("error %q does not name the socket %s", err, socket)
	}
	if code := status.Code(err); code != codes.Unavailable {
		t.Errorf("status code = %v, want %v (wrapped)", code, codes.Unavailable)
	}
	if s := w.Stats(); s.Failures != 1 || s.Successes != 1 || s.LastError != err.Error() {
		t.Errorf("Stats() = %+v, want 1 failure, 1 success, LastError %q", s, err)
	}

	clock.Step(29 * time.Second)
	if got := w.Assignments(); !reflect.DeepEqual(got, want) {
		t.Errorf("within MaxAge: Assignments() = %v, want the previous %v", got, want)
	}
	clock.Step(2 * time.Second)
	if got := w.Assignments(); got == nil || len(got) != 0 {
		t.Errorf("after MaxAge: Assignments() = %#v, want empty non-nil", got)
	}
}

func TestRefreshSlowServer(t *testing.T) {
	const timeout = 200 * time.Millisecond
	socket := socketPath(t)
	kubelet := newFakeKubelet(pod("default", "a", ctr("main", dev("nvidia.com/gpu", "GPU-1"))))
	serve(t, socket, kubelet)
	w := newTestWatcher(t, socket, func(o *Options) { o.Timeout = timeout })

	if err := w.Refresh(t.Context()); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	want := w.Assignments()
	<-kubelet.entered // drain the first call's signal

	kubelet.setDelay(time.Minute)
	type result struct {
		err     error
		elapsed time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		err := w.Refresh(t.Context())
		done <- result{err, time.Since(start)}
	}()

	<-kubelet.entered
	// While List hangs, reads are served from the last snapshot at once.
	for range 100 {
		start := time.Now()
		got := w.Assignments()
		if d := time.Since(start); d > 50*time.Millisecond {
			t.Fatalf("Assignments() took %v during a slow refresh", d)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Assignments() = %v during a slow refresh, want %v", got, want)
		}
	}

	select {
	case r := <-done:
		if code := status.Code(r.err); code != codes.DeadlineExceeded {
			t.Errorf("Refresh error = %v, want code %v", r.err, codes.DeadlineExceeded)
		}
		if r.elapsed < timeout || r.elapsed > timeout+time.Second {
			t.Errorf("Refresh returned after %v, want about %v", r.elapsed, timeout)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Refresh did not honour its timeout")
	}
	if got := w.Stats().Failures; got != 1 {
		t.Errorf("Failures = %d, want 1", got)
	}
}

func TestRun(t *testing.T) {
	socket := socketPath(t)
	w := newTestWatcher(t, socket, func(o *Options) { o.Interval = 20 * time.Millisecond })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()

	// No kubelet yet: Run keeps trying instead of giving up.
	eventually(t, 5*time.Second, "failed refreshes", func() bool { return w.Stats().Failures >= 2 })

	kubelet := newFakeKubelet(pod("default", "a", ctr("main", dev("nvidia.com/gpu", "GPU-1"))))
	serve(t, socket, kubelet)
	eventually(t, 5*time.Second, "GPU-1 to be attributed", func() bool { return len(w.Assignments()["GPU-1"]) == 1 })

	kubelet.setPods(
		pod("default", "a", ctr("main", dev("nvidia.com/gpu", "GPU-1"))),
		pod("default", "b", ctr("main", dev("nvidia.com/gpu", "GPU-2"))),
	)
	eventually(t, 5*time.Second, "the added pod", func() bool { return len(w.Assignments()["GPU-2"]) == 1 })

	cancel()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return after ctx was canceled")
	}
	if s := w.Stats(); s.LastError != "" {
		t.Errorf("LastError = %q after recovery, want empty", s.LastError)
	}
}

func TestRefreshRecovery(t *testing.T) {
	socket := socketPath(t)
	stop := serve(t, socket, newFakeKubelet(pod("default", "a", ctr("main", dev("nvidia.com/gpu", "GPU-1")))))
	w := newTestWatcher(t, socket, nil)
	if err := w.Refresh(t.Context()); err != nil {
		t.Fatalf("Refresh: %v", err)
	}

	stop()
	if err := w.Refresh(t.Context()); err == nil {
		t.Fatal("Refresh succeeded with the kubelet down")
	}

	// The kubelet comes back on the same path with other pods.
	serve(t, socket, newFakeKubelet(pod("default", "b", ctr("main", dev("nvidia.com/gpu", "GPU-2")))))
	eventually(t, 5*time.Second, "a successful refresh", func() bool { return w.Refresh(t.Context()) == nil })
	want := Assignments{"GPU-2": {{Namespace: "default", Pod: "b", Container: "main"}}}
	if got := w.Assignments(); !reflect.DeepEqual(got, want) {
		t.Errorf("Assignments() = %v, want %v", got, want)
	}
}

func TestClose(t *testing.T) {
	socket := socketPath(t)
	serve(t, socket, newFakeKubelet())
	w := newTestWatcher(t, socket, nil)
	if err := w.Refresh(t.Context()); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := w.Refresh(t.Context()); !errors.Is(err, ErrClosed) {
		t.Errorf("Refresh after Close = %v, want ErrClosed", err)
	}
}

func TestPublishKeepsNewest(t *testing.T) {
	w := NewWatcher(Options{})
	now := time.Now()
	newer := Assignments{"GPU-new": nil}
	w.publish(&snapshot{assignments: newer, at: now, gen: 2})
	// A slow refresh that started earlier must not overwrite it.
	w.publish(&snapshot{assignments: Assignments{"GPU-old": nil}, at: now, gen: 1})
	if got := w.Assignments(); !reflect.DeepEqual(got, newer) {
		t.Errorf("Assignments() = %v, want %v", got, newer)
	}
}
