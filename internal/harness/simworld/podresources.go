package simworld

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuscale/gpuscale/pkg/exporter/backend/sim"
)

// socketPath names node's socket by a hash, so that any node name fits the
// unix socket length limit.
func socketPath(dir, node string) string {
	h := sha256.Sum256([]byte(node))
	return filepath.Join(dir, fmt.Sprintf("%x.sock", h[:6]))
}

// podResourcesServer is one node's kubelet pod-resources endpoint.
type podResourcesServer struct {
	podresourcesv1.UnimplementedPodResourcesListerServer

	node   string
	path   string
	list   func(node string) []*podresourcesv1.PodResources
	server *grpc.Server
	done   chan struct{}
}

// startPodResources serves List for node on its socket in dir, replacing a
// stale socket file.
func startPodResources(dir, node string, list func(string) []*podresourcesv1.PodResources) (*podResourcesServer, error) {
	path := socketPath(dir, node)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket: %w", err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	s := &podResourcesServer{node: node, path: path, list: list, server: grpc.NewServer(), done: make(chan struct{})}
	podresourcesv1.RegisterPodResourcesListerServer(s.server, s)
	go func() {
		defer close(s.done)
		_ = s.server.Serve(l)
	}()
	return s, nil
}

// List implements the kubelet's PodResourcesLister.
func (s *podResourcesServer) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	return &podresourcesv1.ListPodResourcesResponse{PodResources: s.list(s.node)}, nil
}

// stop closes the socket, as a stopped kubelet does.
func (s *podResourcesServer) stop() {
	s.server.Stop()
	<-s.done
	_ = os.Remove(s.path)
}

// podResources is what node's kubelet would report: every pod bound to it
// that has not terminated, with the GPUs each container holds.
func (w *World) podResources(node string) []*podresourcesv1.PodResources {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.podIndex == nil {
		return nil
	}
	pods := w.nodePodsLocked(node)
	alloc := w.assignNodeLocked(node, pods)
	out := make([]*podresourcesv1.PodResources, 0, len(pods))
	for _, p := range pods {
		if terminal(p) {
			continue
		}
		pr := &podresourcesv1.PodResources{Name: p.Name, Namespace: p.Namespace}
		for _, c := range p.Spec.Containers {
			cr := &podresourcesv1.ContainerResources{Name: c.Name}
			if idx := alloc[keyOf(p)][c.Name]; len(idx) > 0 {
				ids := make([]string, len(idx))
				for i, g := range idx {
					ids[i] = sim.GPUUUID(node, g)
				}
				cr.Devices = []*podresourcesv1.ContainerDevices{{ResourceName: GPUResource, DeviceIds: ids}}
			}
			pr.Containers = append(pr.Containers, cr)
		}
		out = append(out, pr)
	}
	return out
}

// nodePodsLocked returns the pods bound to node, in a stable order.
func (w *World) nodePodsLocked(node string) []*corev1.Pod {
	objs, err := w.podIndex.ByIndex(nodeIndex, node)
	if err != nil {
		w.log.Error("pod index", "err", err) // unreachable: the index is registered
		return nil
	}
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			pods = append(pods, p)
		}
	}
	slices.SortFunc(pods, func(a, b *corev1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return pods
}

// assignNodeLocked brings node's GPU assignment up to date with its pods
// and queues the GPUs of pods that went away to be set idle.
func (w *World) assignNodeLocked(node string, pods []*corev1.Pod) map[podKey]allocation {
	prev := w.gpus[node]
	next := assignGPUs(prev, gpuRequests(pods), w.nodeGPUsLocked(node))
	for k, a := range prev {
		if _, ok := next[k]; ok {
			continue
		}
		for _, idx := range a {
			for _, i := range idx {
				w.markIdleLocked(gpuRef{node, i}, true)
			}
		}
	}
	if len(next) == 0 {
		delete(w.gpus, node)
	} else {
		w.gpus[node] = next
	}
	return next
}
