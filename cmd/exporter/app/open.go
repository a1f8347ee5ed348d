package app

import (
	"context"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/gpuscale/gpuscale/pkg/exporter"
	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// defaultOpenBackoff waits 1 s after the first failure, doubling to at most
// a minute, with jitter so that a fleet of new nodes does not retry in step.
func defaultOpenBackoff() wait.Backoff {
	return wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: time.Minute}
}

// backendOpener opens a GPU backend, retrying with backoff until it opens
// or its context ends.
type backendOpener struct {
	openFn   func() (gpu.Backend, error)
	clock    clock.Clock
	backoff  wait.Backoff
	log      *slog.Logger
	failures prometheus.Counter
}

func newOpener(open func() (gpu.Backend, error), clk clock.Clock, b wait.Backoff, log *slog.Logger, reg prometheus.Registerer) *backendOpener {
	op := &backendOpener{openFn: open, clock: clk, backoff: b, log: log,
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpuscale_exporter_backend_open_failures_total",
			Help: "Failed attempts to open the GPU backend (NVML initialisation); the exporter retries with backoff and stays unready meanwhile.",
		})}
	if reg != nil {
		reg.MustRegister(op.failures)
	}
	return op
}

// open returns the backend once it opens, or ctx's error.
func (op *backendOpener) open(ctx context.Context) (gpu.Backend, error) {
	b := op.backoff
	for {
		backend, err := op.openFn()
		if err == nil {
			return backend, nil
		}
		op.failures.Inc()
		delay := b.Step()
		op.log.Warn("cannot open the GPU backend; retrying", "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-op.clock.After(delay):
		}
	}
}

// lateSource is the collector as the HTTP handlers see it, before and
// after the backend opens. Before, the exporter is alive (healthy, as it
// is retrying) but has nothing to serve (not ready).
type lateSource struct {
	col atomic.Pointer[exporter.Collector]
}

func (s *lateSource) Snapshot() *exporter.Snapshot {
	if c := s.col.Load(); c != nil {
		return c.Snapshot()
	}
	return nil
}

func (s *lateSource) Healthy() (bool, time.Duration) {
	if c := s.col.Load(); c != nil {
		return c.Healthy()
	}
	return true, 0
}
