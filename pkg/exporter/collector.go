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
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/gpu/dcgm"
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
	// Schema is the naming schema of the series.
	Schema dcgm.Schema
	// metrics are the GPU series' families, sorted by name, never changed
	// once published.
	metrics []*dto.MetricFamily
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
	// Schema is the dcgm-exporter naming schema served; 4.8 when zero.
	Schema dcgm.Schema
	// Selection is the fields served, as a collector file selects them;
	// every field when nil.
	Selection *metrics.Selection
	// XIDCountWindow is DCGM_EXP_XID_ERRORS_COUNT's window; zero serves
	// no such series.
	XIDCountWindow time.Duration
	// PodMeta, with PodUID or PodLabels, adds each holder pod's UID or
	// labels to its series.
	PodMeta           metrics.PodMetadata
	PodUID, PodLabels bool
	Logger            *slog.Logger
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
	fieldErrors *prometheus.CounterVec
	xids        xidWindows
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
		cfg: cfg,
		log: cfg.Logger,
		builder: metrics.NewGPUBuilder(metrics.Options{Schema: cfg.Schema, Hostname: cfg.Hostname,
			DriverVersion: cfg.Backend.DriverVersion(), Simulated: cfg.Backend.Kind().Simulated(),
			Selection: cfg.Selection, XIDCountWindow: cfg.XIDCountWindow, PodUID: cfg.PodUID, PodLabels: cfg.PodLabels}),
		xids: newXIDWindows(cfg.XIDCountWindow),
		self: newSelfMetrics(cfg.Backend.Kind(), cfg.Backend.DriverVersion()),
		now:  time.Now,
		attribution: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscale_exporter_process_attribution_failures_total",
			Help: "Processes on a shared GPU, counted once per collection, whose share is served with empty pod labels, by reason: no_cgroup (unreadable /proc/<pid>/cgroup, often an exited process), not_in_pod, unknown_container (the runtime does not know it), pod_mismatch (the runtime's pod UID differs from the cgroup's) or not_assigned (its pod does not hold the GPU per the kubelet).",
		}, []string{"reason"}),
		fieldErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscale_exporter_field_errors_total",
			Help: "Fields a collection could not read, by field (the exporter's JSON API name) and code (for NVML, the return code, e.g. ERROR_UNKNOWN). The field is absent from that collection; the device's other fields are served. ERROR_NOT_SUPPORTED on a field the GPU lacks is counted at most once per device.",
		}, []string{"field", "code"}),
	}
	for _, r := range attributionReasons {
		c.attribution.WithLabelValues(r)
	}
	if cfg.Registerer != nil {
		if err := c.self.register(cfg.Registerer, cfg.Backend); err != nil {
			return nil, fmt.Errorf("exporter: register own metrics: %w", err)
		}
		for _, col := range []prometheus.Collector{c.attribution, c.fieldErrors} {
			if err := cfg.Registerer.Register(col); err != nil {
				return nil, fmt.Errorf("exporter: register own metrics: %w", err)
			}
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
		Schema:  c.builder.Schema(),
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
		for _, fe := range r.FieldErrors {
			c.fieldErrors.WithLabelValues(fe.Field.String(), fe.Code).Inc()
		}
	}
	c.xids.observe(start, s.Devices)
	s.metrics = c.builder.Build(s.Devices, c.cfg.PodMeta)
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

// Gather implements prometheus.Gatherer over the newest snapshot's GPU
// series, for callers that merge them with a registry's. It copies them:
// prometheus.Gatherers sorts what it is given in place. The exporter's
// /metrics serves Snapshot.Exposition instead, without copying.
func (c *Collector) Gather() ([]*dto.MetricFamily, error) {
	s := c.snap.Load()
	if s == nil {
		return nil, nil
	}
	out := make([]*dto.MetricFamily, len(s.metrics))
	for i, mf := range s.metrics {
		out[i] = proto.Clone(mf).(*dto.MetricFamily)
	}
	return out, nil
}
