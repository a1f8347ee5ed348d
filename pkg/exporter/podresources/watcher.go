// Package podresources attributes GPUs to the pods that hold them through the
// kubelet pod-resources v1 API (service PodResourcesLister, RPC List), served
// on a unix socket on every node.
//
// A Watcher polls the kubelet in the background and publishes the result
// atomically, so that the scrape path reads the latest attribution without
// ever waiting on the kubelet.
package podresources

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Defaults applied by NewWatcher to zero Options fields.
const (
	DefaultSocket   = "/var/lib/kubelet/pod-resources/kubelet.sock"
	DefaultInterval = 5 * time.Second
	DefaultTimeout  = 2 * time.Second
	DefaultMaxAge   = 60 * time.Second
)

// maxRecvMsgSize bounds a List response so that a misbehaving peer cannot
// make the exporter allocate without limit; a node with hundreds of pods
// stays far below it.
const maxRecvMsgSize = 16 << 20

// ErrClosed is returned by Refresh after Close.
var ErrClosed = errors.New("podresources: watcher closed")

// DefaultResourceNames returns the resource names honoured when
// Options.ResourceNames is empty: whole GPUs, every MIG profile, and
// "nvidia.com/gpu.shared", the name the NVIDIA device plugin advertises for
// time-sliced GPUs when it renames shared resources (MIG profiles keep the
// "nvidia.com/mig-" prefix when renamed, so the prefix covers them).
func DefaultResourceNames() []string {
	return []string{"nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*"}
}

// Options configures a Watcher. Zero fields take the defaults above.
type Options struct {
	// Socket is the path of the kubelet pod-resources unix socket.
	Socket string
	// ResourceNames are the resource names to honour; an entry ending in
	// "*" is a prefix match.
	ResourceNames []string
	// Interval is the refresh period of Run.
	Interval time.Duration
	// Timeout is the deadline of each List call.
	Timeout time.Duration
	// MaxAge is how long the last good Assignments are served while
	// refreshes fail. After that Assignments returns an empty map, because
	// pods come and go and stale attribution would label a GPU with a pod
	// that no longer holds it.
	MaxAge time.Duration
	// Logger receives refresh failures and recoveries.
	Logger *slog.Logger
}

// snapshot is one published List result.
type snapshot struct {
	assignments Assignments
	at          time.Time
	// gen orders snapshots by the start of the refresh that produced them,
	// so that a slow refresh cannot overwrite the result of a later one.
	gen uint64
}

// Watcher keeps the device-to-pod Assignments of the local kubelet up to
// date. It is safe for concurrent use.
type Watcher struct {
	opts Options
	log  *slog.Logger
	// now is the clock; tests replace it.
	now func() time.Time

	current atomic.Pointer[snapshot]
	gen     atomic.Uint64

	connMu sync.Mutex
	conn   *grpc.ClientConn
	client podresourcesv1.PodResourcesListerClient
	closed bool

	statsMu sync.Mutex
	stats   Stats
	// loggedErr is the failure message last logged, so that a kubelet that
	// stays down logs once rather than every Interval.
	loggedErr string
}

// NewWatcher returns a Watcher for opts. It does not connect; the first
// Refresh (or Run) does.
func NewWatcher(opts Options) *Watcher {
	if opts.Socket == "" {
		opts.Socket = DefaultSocket
	}
	if len(opts.ResourceNames) == 0 {
		opts.ResourceNames = DefaultResourceNames()
	} else {
		opts.ResourceNames = append([]string(nil), opts.ResourceNames...)
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = DefaultMaxAge
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Watcher{
		opts: opts,
		log:  opts.Logger.With("socket", opts.Socket),
		now:  time.Now,
	}
}

// Run refreshes immediately, then every Interval until ctx is done. Failures
// are recorded in Stats and logged; they never stop the loop.
func (w *Watcher) Run(ctx context.Context) {
	ticker := time.NewTicker(w.opts.Interval)
	defer ticker.Stop()
	for {
		// The error is already counted and logged by Refresh.
		_ = w.Refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// Refresh lists the pod resources once, bounded by Options.Timeout. On success
// it publishes the new Assignments atomically; on failure it keeps the
// previous ones (until MaxAge) and returns an error naming the socket.
func (w *Watcher) Refresh(ctx context.Context) error {
	gen := w.gen.Add(1)
	a, err := w.list(ctx)
	if err != nil {
		err = fmt.Errorf("listing pod resources from kubelet socket %s: %w", w.opts.Socket, err)
		w.recordFailure(ctx, err)
		return err
	}
	now := w.now()
	w.publish(&snapshot{assignments: a, at: now, gen: gen})
	w.recordSuccess(now, len(a))
	return nil
}

// Assignments returns the latest good result without blocking. It is empty
// (never nil) before the first success and once the latest success is older
// than MaxAge. The returned map is shared and must not be modified.
func (w *Watcher) Assignments() Assignments {
	s := w.current.Load()
	if s == nil || w.now().Sub(s.at) > w.opts.MaxAge {
		return Assignments{}
	}
	return s.assignments
}

// Close closes the gRPC connection. Later calls to Refresh return ErrClosed;
// Assignments keeps serving the last result until MaxAge.
func (w *Watcher) Close() error {
	w.connMu.Lock()
	defer w.connMu.Unlock()
	w.closed = true
	if w.conn == nil {
		return nil
	}
	err := w.conn.Close()
	w.conn, w.client = nil, nil
	if err != nil {
		return fmt.Errorf("closing connection to kubelet socket %s: %w", w.opts.Socket, err)
	}
	return nil
}

func (w *Watcher) list(ctx context.Context) (Assignments, error) {
	client, err := w.getClient()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, w.opts.Timeout)
	defer cancel()
	resp, err := client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, err
	}
	return buildAssignments(resp, w.opts.ResourceNames), nil
}

// getClient creates the gRPC client on first use and reuses it afterwards.
// grpc.NewClient does not dial, so a missing socket is not an error here: the
// channel connects on the first call and reconnects by itself when the
// kubelet restarts and the socket reappears.
func (w *Watcher) getClient() (podresourcesv1.PodResourcesListerClient, error) {
	w.connMu.Lock()
	defer w.connMu.Unlock()
	if w.closed {
		return nil, ErrClosed
	}
	if w.client != nil {
		return w.client, nil
	}
	// gRPC's default reconnect backoff grows to 2 minutes, longer than
	// MaxAge; a local socket is cheap to retry, so cap it at Interval.
	bo := backoff.DefaultConfig
	bo.BaseDelay = min(bo.BaseDelay, w.opts.Interval)
	bo.MaxDelay = max(w.opts.Interval, bo.BaseDelay)
	conn, err := grpc.NewClient(socketTarget(w.opts.Socket),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvMsgSize)),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: w.opts.Timeout}),
	)
	if err != nil {
		return nil, fmt.Errorf("creating gRPC client: %w", err)
	}
	w.conn = conn
	w.client = podresourcesv1.NewPodResourcesListerClient(conn)
	return w.client, nil
}

// socketTarget returns the gRPC target of a unix socket path. "unix://" must
// be followed by an absolute path; relative paths use the "unix:" form.
func socketTarget(path string) string {
	if filepath.IsAbs(path) {
		return "unix://" + path
	}
	return "unix:" + path
}

// publish stores s unless a refresh that started later has already
// published.
func (w *Watcher) publish(s *snapshot) {
	for {
		old := w.current.Load()
		if old != nil && old.gen > s.gen {
			return
		}
		if w.current.CompareAndSwap(old, s) {
			return
		}
	}
}
