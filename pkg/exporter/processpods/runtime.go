// The runtime half: the pod of every container on the node, from
// the container runtime's CRI ListContainers: the labels the kubelet puts
// on each container it creates (io.kubernetes.pod.namespace, .pod.name,
// .pod.uid, .container.name). The exporter needs it to attribute a GPU
// process, known by the container ID in its cgroup, to its pod.
//
// The index is refreshed in the background and answered from memory; when
// refreshes keep failing for longer than MaxAge it answers nothing rather
// than name pods that may have gone.

package processpods

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The labels the kubelet sets on every container it creates.
const (
	labelNamespace = "io.kubernetes.pod.namespace"
	labelPod       = "io.kubernetes.pod.name"
	labelPodUID    = "io.kubernetes.pod.uid"
	labelContainer = "io.kubernetes.container.name"
)

// maxRecvMsgSize bounds a ListContainers answer; a node with hundreds of
// containers stays far below it.
const maxRecvMsgSize = 16 << 20

// Container is a Kubernetes container as the runtime labels it.
type Container struct {
	Namespace, Pod, PodUID, Name string
}

// RuntimeOptions configures an RuntimeIndex.
type RuntimeOptions struct {
	// Socket is the runtime's CRI socket, for example
	// /run/containerd/containerd.sock or /var/run/crio/crio.sock.
	Socket   string
	Interval time.Duration
	Timeout  time.Duration
	// MaxAge is how long the last good index is served while refreshes fail.
	MaxAge time.Duration
	Logger *slog.Logger
}

type snapshot struct {
	byID map[string]Container
	at   time.Time
}

// RuntimeIndex maps container IDs to their pods. It is safe for concurrent use.
type RuntimeIndex struct {
	opts   RuntimeOptions
	client runtimeapi.RuntimeServiceClient
	conn   *grpc.ClientConn
	cur    atomic.Pointer[snapshot]
	now    func() time.Time
}

// NewRuntimeIndex returns an RuntimeIndex over the runtime at opts.Socket. It does not dial;
// Refresh does.
func NewRuntimeIndex(opts RuntimeOptions) (*RuntimeIndex, error) {
	if opts.Interval <= 0 {
		opts.Interval = 5 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Second
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = 60 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	target := "unix:" + opts.Socket
	if filepath.IsAbs(opts.Socket) {
		target = "unix://" + opts.Socket
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvMsgSize)))
	if err != nil {
		return nil, fmt.Errorf("processpods: %w", err)
	}
	return &RuntimeIndex{opts: opts, conn: conn, client: runtimeapi.NewRuntimeServiceClient(conn), now: time.Now}, nil
}

// Close closes the connection.
func (x *RuntimeIndex) Close() error { return x.conn.Close() }

// Run refreshes the index every Interval until ctx is done.
func (x *RuntimeIndex) Run(ctx context.Context) {
	t := time.NewTicker(x.opts.Interval)
	defer t.Stop()
	for {
		if err := x.Refresh(ctx); err != nil && ctx.Err() == nil {
			x.opts.Logger.Warn("cannot list the runtime's containers", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Refresh lists the runtime's containers once. Containers without the
// kubelet's labels (not created by the kubelet) are left out.
func (x *RuntimeIndex) Refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, x.opts.Timeout)
	defer cancel()
	start := x.now()
	resp, err := x.client.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return fmt.Errorf("processpods: list containers: %w", err)
	}
	byID := make(map[string]Container, len(resp.GetContainers()))
	for _, c := range resp.GetContainers() {
		l := c.GetLabels()
		ctr := Container{Namespace: l[labelNamespace], Pod: l[labelPod], PodUID: l[labelPodUID], Name: l[labelContainer]}
		if c.GetId() == "" || ctr.Namespace == "" || ctr.Pod == "" || ctr.PodUID == "" {
			continue
		}
		byID[c.GetId()] = ctr
	}
	x.cur.Store(&snapshot{byID: byID, at: start})
	return nil
}

// Lookup returns the container with ID id, from the last refresh no older
// than MaxAge.
func (x *RuntimeIndex) Lookup(id string) (Container, bool) {
	s := x.cur.Load()
	if s == nil || x.now().Sub(s.at) > x.opts.MaxAge {
		return Container{}, false
	}
	c, ok := s.byID[id]
	return c, ok
}
