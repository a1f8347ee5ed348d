// Package exporter runs the exporter's collection loop: it reads the GPU
// backend and the pod attribution in the background and publishes an
// immutable snapshot. Scrapes and API calls only read the latest snapshot;
// they never call NVML or the kubelet.
package exporter

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/metrics"
)

// PodSource tells which containers hold which devices. The kubelet
// pod-resources watcher implements it; it must answer from memory.
type PodSource interface {
	// PodsByDevice maps a device ID (GPU or MIG UUID) to its holders.
	PodsByDevice() map[string][]metrics.PodRef
}

// ProcessPods names the pod of a GPU process, from memory.
type ProcessPods interface {
	// PodOf returns the container pid runs in, or the reason it is in no
	// known pod ("" on success).
	PodOf(pid uint32) (ref metrics.PodRef, reason string)
}

// Snapshot is one collection, immutable once published.
type Snapshot struct {
	Time    time.Time
	Backend gpu.Kind
	Driver  string
	Devices []metrics.DeviceState
	metrics []prometheus.Metric
	// text and openMetrics are metrics, encoded (Exposition).
	text, openMetrics []byte
	families          map[string]bool
}

// Config configures a Collector.
type Config struct {
	Backend gpu.Backend
	Pods    PodSource // optional
	// Processes, when set with Pods, attributes the processes on a GPU
	// that several pods share, so that each pod is served its own share.
	Processes ProcessPods
	Hostname  string
	Interval  time.Duration
	Logger    *slog.Logger
	// Registerer receives the collector's own metrics (duration, errors,
	// last success). Nil skips them.
	Registerer prometheus.Registerer
}

// Collector fills snapshots on a timer and serves the newest one to
// Prometheus (it implements prometheus.Collector).
type Collector struct {
	cfg     Config
	log     *slog.Logger
	builder *metrics.GPUBuilder
	snap    atomic.Pointer[Snapshot]
	// collecting serialises collections: the backend contract allows no
	// concurrent Collect, and snapshots must publish in order. The
	// simulated load API collects out of turn.
	collecting  sync.Mutex
	self        *selfMetrics
	attribution *prometheus.CounterVec
	now         func() time.Time
}

// NewCollector builds a Collector; call Run to start collecting.
func NewCollector(cfg Config) (*Collector, error) {
	if cfg.Backend == nil {
		return nil, fmt.Errorf("exporter: a GPU backend is required")
	}
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("exporter: collect interval must be positive, got %v", cfg.Interval)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Collector{
		cfg:     cfg,
		log:     cfg.Logger,
		builder: metrics.NewGPUBuilder(cfg.Hostname, cfg.Backend.DriverVersion(), cfg.Backend.Kind().Simulated()),
		self:    newSelfMetrics(cfg.Backend.Kind(), cfg.Backend.DriverVersion()),
		now:     time.Now,
		attribution: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscale_exporter_process_attribution_failures_total",
			Help: "Processes on a shared GPU, counted once per collection, whose share is served with empty pod labels, by reason: no_cgroup (unreadable /proc/<pid>/cgroup, often an exited process), not_in_pod, unknown_container (the runtime does not know it), pod_mismatch (the runtime's pod UID differs from the cgroup's) or not_assigned (its pod does not hold the GPU per the kubelet).",
		}, []string{"reason"}),
	}
	for _, r := range attributionReasons {
		c.attribution.WithLabelValues(r)
	}
	if cfg.Registerer != nil {
		if err := c.self.register(cfg.Registerer, cfg.Backend); err != nil {
			return nil, fmt.Errorf("exporter: register own metrics: %w", err)
		}
		if err := cfg.Registerer.Register(c.attribution); err != nil {
			return nil, fmt.Errorf("exporter: register own metrics: %w", err)
		}
	}
	return c, nil
}

// Run collects immediately and then every interval until ctx is done.
func (c *Collector) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		if err := c.CollectOnce(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("GPU collection failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// CollectOnce reads the backend and the pod attribution and publishes a new
// snapshot. When the backend fails as a whole the previous snapshot stays
// published but ages: /healthz reports it and LastSuccess stops moving.
func (c *Collector) CollectOnce(ctx context.Context) (err error) {
	c.collecting.Lock()
	defer c.collecting.Unlock()
	start := c.now()
	defer func() {
		// A backend bug must not kill the exporter: the next tick retries.
		if r := recover(); r != nil {
			err = fmt.Errorf("exporter: collection panicked: %v", r)
		}
		c.self.observe(c.now().Sub(start), err)
	}()
	readings, err := c.cfg.Backend.Collect(ctx)
	if err != nil {
		return fmt.Errorf("exporter: read %s backend: %w", c.cfg.Backend.Kind(), err)
	}
	var byDevice map[string][]metrics.PodRef
	if c.cfg.Pods != nil {
		byDevice = c.cfg.Pods.PodsByDevice()
	}
	s := &Snapshot{
		Time:    start,
		Backend: c.cfg.Backend.Kind(),
		Driver:  c.cfg.Backend.DriverVersion(),
		Devices: make([]metrics.DeviceState, len(readings)),
	}
	unhealthy := 0
	for i, r := range readings {
		s.Devices[i] = metrics.DeviceState{Reading: r, Pods: byDevice[r.Device.ID()]}
		if c.cfg.Processes != nil && r.Healthy() && r.Processes != nil && len(s.Devices[i].Pods) > 1 {
			s.Devices[i].Shares = c.shares(r.Processes, s.Devices[i].Pods)
		}
		if !r.Healthy() {
			unhealthy++
		}
	}
	s.metrics = c.builder.Build(s.Devices)
	if s.text, s.openMetrics, s.families, err = encodeExposition(s.metrics); err != nil {
		return err
	}
	c.snap.Store(s)
	c.self.devices(len(readings), unhealthy, start)
	return nil
}

// Snapshot returns the newest snapshot, or nil before the first success.
func (c *Collector) Snapshot() *Snapshot { return c.snap.Load() }

// Healthy reports whether the last successful collection is recent: no older
// than three intervals.
func (c *Collector) Healthy() (bool, time.Duration) {
	s := c.snap.Load()
	if s == nil {
		return false, 0
	}
	age := c.now().Sub(s.Time)
	return age <= 3*c.cfg.Interval, age
}

// Describe implements prometheus.Collector. The GPU series vary with the
// hardware, so the collector is unchecked.
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector: it replays the snapshot's
// prebuilt metrics, so a scrape costs no device or kubelet calls. The
// exporter's /metrics serves Snapshot.Exposition instead, cheaper still.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.snap.Load()
	if s == nil {
		return
	}
	for _, m := range s.metrics {
		ch <- m
	}
}
