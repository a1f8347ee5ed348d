package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/gpuscale/gpuscale/pkg/exporter"
	"github.com/gpuscale/gpuscale/pkg/exporter/httpapi"
	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/gpu/sim"
	"github.com/gpuscale/gpuscale/pkg/metrics"
	"github.com/gpuscale/gpuscale/pkg/podresources"
)

// Run starts the exporter and blocks until ctx is cancelled, then shuts
// down gracefully. ready, if not nil, receives the bound address once the
// server listens.
func Run(ctx context.Context, o *Options, log *slog.Logger, ready func(addr net.Addr)) error {
	backend, err := newBackend(o, log)
	if err != nil {
		return err
	}
	defer backend.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	var pods exporter.PodSource
	if o.PodResourcesSocket != "" {
		w := podresources.NewWatcher(podresources.Options{
			Socket:        o.PodResourcesSocket,
			ResourceNames: append([]string{"nvidia.com/gpu", "nvidia.com/mig-*"}, splitList(o.ExtraResourceNames)...),
			Interval:      o.PodResourcesInterval,
			Timeout:       o.PodResourcesTimeout,
			Logger:        log.With("component", "podresources"),
		})
		defer w.Close()
		if err := reg.Register(newPodResourcesCollector(w)); err != nil {
			return fmt.Errorf("register pod-resources metrics: %w", err)
		}
		go w.Run(ctx)
		pods = podSource{w}
	}

	col, err := exporter.NewCollector(exporter.Config{
		Backend: backend, Pods: pods, Hostname: o.Hostname, Interval: o.CollectInterval,
		Logger: log.With("component", "collector"), Registerer: reg,
	})
	if err != nil {
		return err
	}
	reg.MustRegister(col)
	// The deferred backend.Close must not run while a collection is still
	// reading the backend (NVML would be shut down under it), so wait for
	// the loop to stop first.
	collecting := make(chan struct{})
	go func() { defer close(collecting); col.Run(ctx) }()
	defer func() { cancel(); <-collecting }()

	api := httpapi.Config{Source: col, Gatherer: reg, Hostname: o.Hostname, Registerer: reg,
		MaxRequests: o.MaxRequests, MaxRequestsWait: o.MaxRequestsWait}
	if s, ok := backend.(*sim.Backend); ok {
		api.Sim = s
		api.Collect = func() { _ = col.CollectOnce(ctx) }
	}
	return serve(ctx, o, httpapi.New(api), log, ready)
}

func newBackend(o *Options, log *slog.Logger) (gpu.Backend, error) {
	switch o.Backend {
	case "sim":
		log.Warn("using the SIMULATED GPU backend: every series carries simulated=\"true\"", "gpus", o.SimGPUs, "model", o.SimModel)
		return sim.New(sim.Options{GPUs: o.SimGPUs, Model: o.SimModel, MIGProfiles: splitList(o.SimMIGProfiles), Identity: o.Hostname})
	case "nvml":
		return newNVMLBackend(log)
	}
	return nil, fmt.Errorf("unknown backend %q", o.Backend)
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
