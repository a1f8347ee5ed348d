package podresources

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/util/wait"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// fakeKubelet is a PodResourcesLister served over a real unix socket.
type fakeKubelet struct {
	podresourcesv1.UnimplementedPodResourcesListerServer

	mu    sync.Mutex
	pods  []*podresourcesv1.PodResources
	delay time.Duration
	// entered receives a value (without blocking) each time List starts,
	// so tests can act while a call is in flight.
	entered chan struct{}
}

func newFakeKubelet(pods ...*podresourcesv1.PodResources) *fakeKubelet {
	return &fakeKubelet{pods: pods, entered: make(chan struct{}, 1)}
}

func (f *fakeKubelet) setPods(pods ...*podresourcesv1.PodResources) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods = pods
}

func (f *fakeKubelet) setDelay(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay = d
}

func (f *fakeKubelet) List(ctx context.Context, _ *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	select {
	case f.entered <- struct{}{}:
	default:
	}
	f.mu.Lock()
	pods, delay := f.pods, f.delay
	f.mu.Unlock()
	if delay > 0 {
		// Honour cancellation so that stopping the server does not wait
		// for the full delay.
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &podresourcesv1.ListPodResourcesResponse{PodResources: pods}, nil
}

// socketPath returns a fresh socket path. os.MkdirTemp keeps it well below the
// ~107-byte unix socket limit that t.TempDir (named after the test) can hit.
func socketPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "kubelet.sock")
}

// serve starts a gRPC server for f on socket and returns a function that
// stops it and removes the socket, as a kubelet restart would.
func serve(t *testing.T, socket string, f *fakeKubelet) (stop func()) {
	t.Helper()
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatalf("listening on %s: %v", socket, err)
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			srv.Stop()
			if err := os.Remove(socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("removing socket: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func newTestWatcher(t *testing.T, socket string, mutate func(*Options)) *Watcher {
	t.Helper()
	opts := Options{
		Socket:   socket,
		Interval: 50 * time.Millisecond,
		Timeout:  2 * time.Second,
		Logger:   slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mutate != nil {
		mutate(&opts)
	}
	w := NewWatcher(opts)
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return w
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

func pod(namespace, name string, ctrs ...*podresourcesv1.ContainerResources) *podresourcesv1.PodResources {
	return &podresourcesv1.PodResources{Namespace: namespace, Name: name, Containers: ctrs}
}

func ctr(name string, devs ...*podresourcesv1.ContainerDevices) *podresourcesv1.ContainerResources {
	return &podresourcesv1.ContainerResources{Name: name, Devices: devs}
}

func dev(resource string, ids ...string) *podresourcesv1.ContainerDevices {
	return &podresourcesv1.ContainerDevices{ResourceName: resource, DeviceIds: ids}
}
