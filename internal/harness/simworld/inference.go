package simworld

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

// inferenceRun is the simulated server of one inference pod.
type inferenceRun struct {
	pod       podKey
	node      string
	container string
	addr      string
	srv       *inferencesim.Server
	http      *http.Server
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	// died is set when the HTTP server stops on its own, so that the next
	// reconcile replaces it.
	died atomic.Bool

	// rate is the rate the World last gave the server; guarded by
	// World.mu.
	rate float64
	// term is how the server ends when its pod is deleted, gpus how many
	// GPUs it holds until then (terminate.go).
	term termination
	gpus int

	// The busy-time window behind GPU utilization; touched only by the
	// GPU update loop.
	windowAt   time.Time
	windowBusy time.Duration
}

// startInference listens on addr and serves a simulated inference server
// for pod's container c until stop.
// The container's SIM_PROFILE names its performance profile
// (inferencesim.Profiles); the default profile when unset.
func startInference(log *slog.Logger, now func() time.Time, pod podKey, node string, c *corev1.Container, addr string) (*inferenceRun, error) {
	dialect, err := inferencesim.ParseDialect(env(c, "SIM_DIALECT", string(inferencesim.VLLM)))
	if err != nil {
		return nil, err
	}
	var profile inferencesim.Profile
	if name := env(c, "SIM_PROFILE", ""); name != "" {
		if profile, err = inferencesim.ProfileByName(name); err != nil {
			return nil, err
		}
	}
	log = log.With("pod", pod.String(), "address", addr)
	srv, err := inferencesim.NewServer(inferencesim.Options{
		Dialect: dialect,
		Model:   env(c, "SIM_MODEL", inferencesim.DefaultModel),
		Profile: profile,
		Seed:    seedOf(pod),
		Now:     now,
		Logger:  log,
	})
	if err != nil {
		return nil, fmt.Errorf("build inference server: %w", err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &inferenceRun{
		pod: pod, node: node, container: c.Name, addr: addr,
		srv:      srv,
		http:     &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second},
		cancel:   cancel,
		windowAt: srv.Stats().Now,
	}
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		_ = srv.Run(ctx)
	}()
	go func() {
		defer r.wg.Done()
		if err := r.http.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			log.Warn("inference server stopped", "err", err)
			r.died.Store(true)
		}
	}()
	log.Info("inference server started", "dialect", dialect)
	return r, nil
}

// stop closes the listener and every connection at once, as a killed
// container would, and waits for the server's goroutines.
func (r *inferenceRun) stop() {
	r.cancel()
	_ = r.http.Close()
	r.wg.Wait()
}
