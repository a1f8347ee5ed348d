package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/exporter-toolkit/web"
	"k8s.io/utils/clock"

	"github.com/gpuscale/gpuscale/pkg/buildinfo"
	"github.com/gpuscale/gpuscale/pkg/exporter"
	"github.com/gpuscale/gpuscale/pkg/exporter/backend/nvml"
	"github.com/gpuscale/gpuscale/pkg/exporter/backend/sim"
	"github.com/gpuscale/gpuscale/pkg/exporter/httpapi"
	"github.com/gpuscale/gpuscale/pkg/exporter/podmeta"
	"github.com/gpuscale/gpuscale/pkg/exporter/podresources"
	"github.com/gpuscale/gpuscale/pkg/exporter/processpods"
	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/gpu/dcgm"
	"github.com/gpuscale/gpuscale/pkg/metrics"
	"github.com/gpuscale/gpuscale/pkg/tokenfile"
)

// Run starts the exporter and blocks until ctx is cancelled, then shuts
// down gracefully. ready, if not nil, receives the bound address once the
// server listens.
//
// The NVML backend is opened after the server listens and retried with
// backoff until it opens: on a new GPU node the driver is often not
// loaded yet. Meanwhile /healthz answers 200 (the process is fine and
// retrying) and /readyz 503.
func Run(ctx context.Context, o *Options, log *slog.Logger, ready func(addr net.Addr)) error {
	if o.Backend != "sim" && o.Backend != "nvml" {
		return fmt.Errorf("unknown backend %q", o.Backend)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildinfo.Collector())
	pods, procs, closeAttribution, err := startAttribution(ctx, o, reg, log)
	if err != nil {
		return err
	}
	defer closeAttribution()

	series, err := newSeriesConfig(ctx, o, reg, log)
	if err != nil {
		return err
	}
	src := &lateSource{}
	api := httpapi.Config{Source: src, Gatherer: reg, Hostname: o.Hostname, Registerer: reg,
		MaxRequests: o.MaxRequests, MaxRequestsWait: o.MaxRequestsWait,
		ReservedMaxRequests: o.ReservedMaxRequests, ReservedMaxRequestsWait: o.ReservedMaxRequestsWait}
	if api.ReservedToken, err = startReservedToken(ctx, o.ReservedTokenFile, reg, log); err != nil {
		return err
	}
	var backend gpu.Backend
	if o.Backend == "sim" {
		s, err := newSimBackend(o, log)
		if err != nil {
			return err
		}
		backend = s
		api.APIRoutes = append(api.APIRoutes, sim.NewLoadControl(s, func() {
			if c := src.col.Load(); c != nil {
				_ = c.CollectOnce(ctx)
			}
		}, reg))
	}
	served := make(chan error, 1)
	go func() {
		err := serve(ctx, o, httpapi.New(api), log, ready)
		cancel() // a server that failed ends the backend's retries too
		served <- err
	}()
	if backend == nil {
		opener := newBackendOpener(o, log, reg)
		if backend, err = opener.open(ctx); err != nil {
			return <-served
		}
	}
	defer backend.Close()

	col, err := exporter.NewCollector(exporter.Config{
		Backend: backend, Pods: pods, Processes: procs, Hostname: o.Hostname, Interval: o.CollectInterval,
		Logger: log.With("component", "collector"), Registerer: reg,
		Schema: series.schema, Selection: series.selection, XIDCountWindow: o.XIDCountWindow,
		PodMeta: series.podMeta, PodUID: o.PodUID, PodLabels: o.PodLabels,
	})
	if err != nil {
		cancel()
		<-served
		return err
	}
	// /metrics serves the collector's encoded snapshot after reg's families: col must not be in reg.
	src.col.Store(col)
	// The deferred backend.Close must not run while a collection is still
	// reading the backend (NVML would be shut down under it), so wait for
	// the loop to stop first.
	collecting := make(chan struct{})
	go func() { defer close(collecting); col.Run(ctx) }()
	defer func() { cancel(); <-collecting }()
	return <-served
}

// seriesConfig is what shapes the GPU series beyond the backend's readings.
type seriesConfig struct {
	schema    dcgm.Schema
	selection *metrics.Selection
	podMeta   metrics.PodMetadata
}

// newSeriesConfig reads the schema and the collector file and, when pod
// labels or UIDs are asked for, starts listing the node's pods.
func newSeriesConfig(ctx context.Context, o *Options, reg prometheus.Registerer, log *slog.Logger) (seriesConfig, error) {
	var sc seriesConfig
	var err error
	if sc.schema, err = dcgm.ParseSchema(o.DCGMSchema); err != nil {
		return sc, err
	}
	if o.Collectors != "" {
		f, err := os.Open(o.Collectors)
		if err != nil {
			return sc, fmt.Errorf("--collectors: %w", err)
		}
		defer f.Close()
		sel, warnings, err := metrics.ParseCollectors(f)
		if err != nil {
			return sc, fmt.Errorf("--collectors %s: %w", o.Collectors, err)
		}
		for _, w := range warnings {
			log.Warn(w)
		}
		sc.selection = sel
	}
	if o.PodLabels || o.PodUID {
		node := os.Getenv("NODE_NAME")
		if node == "" {
			node = o.Hostname
		}
		var allow []*regexp.Regexp
		for _, re := range splitList(o.PodLabelAllowlist) {
			allow = append(allow, regexp.MustCompile(re)) // Validate compiled it
		}
		l, err := podmeta.New(podmeta.Options{Node: node, Interval: o.PodResourcesInterval * 3,
			Timeout: o.PodResourcesTimeout, Allow: allow, Logger: log.With("component", "podmeta")})
		if err != nil {
			return sc, fmt.Errorf("--kubernetes-enable-pod-labels/--kubernetes-enable-pod-uid: %w", err)
		}
		for _, c := range l.Collectors() {
			if err := reg.Register(c); err != nil {
				return sc, fmt.Errorf("register pod metadata metrics: %w", err)
			}
		}
		go l.Run(ctx)
		sc.podMeta = l
	}
	return sc, nil
}

// minReservedToken is the shortest reserved-lane token accepted: one an
// attacker cannot guess.
const minReservedToken = 16

// startReservedToken follows the reserved lane's token file (nil without
// one): a Secret volume marked optional, filled once the adapter has made
// the Secret, so the lane opens when the token appears, follows it when it
// changes, and is closed while there is none.
func startReservedToken(ctx context.Context, path string, reg prometheus.Registerer, log *slog.Logger) (func() []byte, error) {
	if path == "" {
		return nil, nil
	}
	f, err := tokenfile.New(tokenfile.Config{Path: path, MinLength: minReservedToken,
		Metric: "gpuscale_exporter_reserved_token", What: "reserved-lane token (--web.reserved-token-file)",
		Logger: log.With("component", "reserved-lane")})
	if err != nil {
		return nil, err
	}
	for _, c := range f.Collectors() {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register reserved-lane token metrics: %w", err)
		}
	}
	go f.Run(ctx)
	return f.Token, nil
}

// startAttribution starts what names the pods holding each device and, on
// shared GPUs, each process's pod. Either may be nil when disabled.
func startAttribution(ctx context.Context, o *Options, reg prometheus.Registerer, log *slog.Logger) (exporter.PodSource, exporter.ProcessPods, func(), error) {
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	if o.PodResourcesSocket == "" {
		return nil, nil, closeAll, nil
	}
	w := podresources.NewWatcher(podresources.Options{
		Socket:        o.PodResourcesSocket,
		ResourceNames: append(podresources.DefaultResourceNames(), splitList(o.ExtraResourceNames)...),
		Interval:      o.PodResourcesInterval,
		Timeout:       o.PodResourcesTimeout,
		Logger:        log.With("component", "podresources"),
	})
	closers = append(closers, func() { _ = w.Close() })
	if err := reg.Register(newPodResourcesCollector(w)); err != nil {
		closeAll()
		return nil, nil, nil, fmt.Errorf("register pod-resources metrics: %w", err)
	}
	go w.Run(ctx)
	if o.ContainerRuntimeSocket == "" {
		return podSource{w}, nil, closeAll, nil
	}
	idx, err := processpods.NewRuntimeIndex(processpods.RuntimeOptions{Socket: o.ContainerRuntimeSocket,
		Interval: o.PodResourcesInterval, Timeout: o.PodResourcesTimeout,
		Logger: log.With("component", "processpods")})
	if err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	closers = append(closers, func() { _ = idx.Close() })
	go idx.Run(ctx)
	return podSource{w}, processpods.Resolver{Cgroups: processpods.CgroupReader{Root: o.ProcRoot}, Containers: idx}, closeAll, nil
}

func newSimBackend(o *Options, log *slog.Logger) (*sim.Backend, error) {
	log.Warn("using the SIMULATED GPU backend: every series carries simulated=\"true\"", "gpus", o.SimGPUs, "model", o.SimModel)
	return sim.New(sim.Options{GPUs: o.SimGPUs, Model: o.SimModel, MIGProfiles: splitList(o.SimMIGProfiles), Identity: o.Hostname, VGPU: o.SimVGPU})
}

// newNVMLBackend reads the GPUs through NVML (pkg/exporter/backend/nvml's
// Open, which fails in a build without cgo).
func newNVMLBackend(o *Options, log *slog.Logger) (gpu.Backend, error) {
	return nvml.Open(nvml.Options{Logger: log.With("component", "nvml"), XIDEvents: true,
		Processes: o.ContainerRuntimeSocket != "", Profiling: o.Profiling})
}

// newBackendOpener opens the NVML backend, retrying from 1 s doubling to
// 1 min.
func newBackendOpener(o *Options, log *slog.Logger, reg prometheus.Registerer) *backendOpener {
	return newOpener(func() (gpu.Backend, error) { return newNVMLBackend(o, log) },
		clock.RealClock{}, defaultOpenBackoff(), log, reg)
}

// maxHeaderBytes bounds a request's headers (net/http adds 4 KiB of slack).
const maxHeaderBytes = 16 << 10

func serve(ctx context.Context, o *Options, h http.Handler, log *slog.Logger, ready func(net.Addr)) error {
	l, err := net.Listen("tcp", o.ListenAddress)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.ListenAddress, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		ReadTimeout:       o.ReadTimeout,
		WriteTimeout:      o.WriteTimeout,
		// Longer than any sane scrape interval, so scrapers keep their
		// connection between scrapes.
		IdleTimeout: 2 * time.Minute,
		// A scrape's headers are a few hundred bytes; a bearer token a
		// couple of KiB.
		MaxHeaderBytes: maxHeaderBytes,
		// Failed TLS handshakes and the like are what any client can
		// cause at will: not worth more than debug.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	addrs := []string{o.ListenAddress}
	systemd := false
	flags := &web.FlagConfig{WebListenAddresses: &addrs, WebSystemdSocket: &systemd, WebConfigFile: &o.WebConfigFile}
	errc := make(chan error, 1)
	go func() { errc <- web.Serve(l, srv, flags, log) }()
	log.Info("exporter listening", "address", l.Addr().String(), "backend", o.Backend)
	if ready != nil {
		ready(l.Addr())
	}
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("graceful shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// podSource adapts the pod-resources watcher to the collector.
type podSource struct{ w *podresources.Watcher }

func (p podSource) PodsByDevice() map[string][]metrics.PodRef {
	a := p.w.Assignments()
	out := make(map[string][]metrics.PodRef, len(a))
	for id, refs := range a {
		conv := make([]metrics.PodRef, len(refs))
		for i, r := range refs {
			conv[i] = metrics.PodRef{Namespace: r.Namespace, Pod: r.Pod, Container: r.Container}
		}
		out[id] = conv
	}
	return out
}
