package processpods

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakeRuntime answers ListContainers with what the test sets.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	mu         sync.Mutex
	containers []*runtimeapi.Container
}

func (f *fakeRuntime) ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &runtimeapi.ListContainersResponse{Containers: f.containers}, nil
}

func serve(t *testing.T, f *fakeRuntime) (string, func()) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(s, f)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return sock, s.Stop
}

func kubeContainer(id, ns, pod, uid, name string) *runtimeapi.Container {
	return &runtimeapi.Container{Id: id, Labels: map[string]string{
		labelNamespace: ns, labelPod: pod, labelPodUID: uid, labelContainer: name,
	}}
}

func TestIndex(t *testing.T) {
	f := &fakeRuntime{containers: []*runtimeapi.Container{
		kubeContainer("c1", "llm", "vllm-0", "uid-1", "vllm"),
		kubeContainer("c2", "team-a", "nb", "uid-2", "jupyter"),
		{Id: "c3", Labels: map[string]string{"app": "not-from-the-kubelet"}},
	}}
	sock, stop := serve(t, f)
	x, err := NewRuntimeIndex(RuntimeOptions{Socket: sock, MaxAge: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	x.now = func() time.Time { return now }

	if _, ok := x.Lookup("c1"); ok {
		t.Fatal("Lookup answered before any refresh")
	}
	if err := x.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c, ok := x.Lookup("c1"); !ok || c != (Container{Namespace: "llm", Pod: "vllm-0", PodUID: "uid-1", Name: "vllm"}) {
		t.Errorf("Lookup(c1) = %+v, %v", c, ok)
	}
	if _, ok := x.Lookup("c3"); ok {
		t.Error("a container without the kubelet's labels was indexed")
	}
	if _, ok := x.Lookup("nope"); ok {
		t.Error("unknown container found")
	}
	// The runtime goes away: the index is served until MaxAge, then not.
	stop()
	if err := x.Refresh(context.Background()); err == nil {
		t.Fatal("Refresh succeeded with the runtime gone")
	}
	now = now.Add(time.Minute)
	if _, ok := x.Lookup("c1"); !ok {
		t.Error("index dropped before MaxAge")
	}
	now = now.Add(time.Second)
	if _, ok := x.Lookup("c1"); ok {
		t.Error("stale index served after MaxAge")
	}
}
