package app

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/common/config"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuscale/gpuscale/pkg/adapter/discovery"
	"github.com/gpuscale/gpuscale/pkg/adapter/gather"
	"github.com/gpuscale/gpuscale/pkg/adapter/promsource"
	"github.com/gpuscale/gpuscale/pkg/adapter/scrape"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/adapter/storesource"
	"github.com/gpuscale/gpuscale/pkg/provider"
)

// source is where the provider's values come from, per --source.
type source struct {
	values provider.Values
	// loop fills the store: it runs one cycle, calls ready, and goes on
	// until ctx is done. With --source=prometheus it only calls ready.
	loop func(ctx context.Context, ready func())
}

// newStore returns the embedded source's store: samples, and their TTFT
// histograms, for the TTFT window and a scrape more (for the time a scrape
// takes), all the history any request reads; latency windows only where
// their quantiles are read (--latency-window-idle).
func (o *Options) newStore() *store.Store {
	return store.New(o.samplesKept(), store.WithTTFTRetention(o.TTFTWindow+o.ScrapeInterval), store.WithLatencyWindowIdle(o.LatencyWindowIdle))
}

// newSource builds the source; namespaces is consulted only with a
// --prometheus-annotations-namespace-selector, and may be nil without one.
func (o *Options) newSource(pods coreinformers.PodInformer, namespaces discovery.NamespaceGetter, log *slog.Logger) (*source, error) {
	if o.Source == SourcePrometheus {
		return o.prometheusSource(pods, log)
	}
	st := o.newStore()
	exporterSel, err := labels.Parse(o.ExporterSelector)
	if err != nil {
		return nil, err
	}
	promNS, err := labels.Parse(o.PrometheusAnnotationsNamespaces)
	if err != nil {
		return nil, err
	}
	token, err := o.exporterTokenFile(log)
	if err != nil {
		return nil, err
	}
	var exporterToken func() []byte
	if token != nil {
		exporterToken = token.Token
	}
	g, err := gather.New(gather.Config{
		ExporterToken: exporterToken,
		Pods:          pods.Lister(),
		Discovery: discovery.Config{ExporterSelector: exporterSel, ExporterNamespace: o.ExporterNamespace,
			ExporterDaemonSet: o.ExporterDaemonSet, ExporterPort: o.ExporterPort, ExporterPath: o.ExporterPath,
			ScrapeHostNetwork: o.ScrapeHostNetwork, MaxTargetsPerNamespace: o.MaxTargetsPerNamespace,
			PrometheusAnnotations: o.ScrapePrometheusAnnotations, PrometheusNamespaces: promNS, Namespaces: namespaces},
		Scraper: scrape.New(scrape.Config{Timeout: o.ScrapeTimeout, MaxBytes: o.MaxScrapeBytes, Workers: o.ScrapeWorkers,
			MaxIdleConns: o.MaxIdleConns, MaxInflightBytes: o.MaxInflightBytes,
			// Cycles never overlap (gather.Run): one that outlasts the
			// interval delays the next for every target.
			CycleTimeout: o.ScrapeInterval}),
		Store:      st,
		Interval:   o.ScrapeInterval,
		RetainFor:  o.retainFor(),
		Logger:     log.With("component", "gather"),
		Registerer: o.metricsRegisterer(),
	})
	if err != nil {
		return nil, err
	}
	o.metricsRegisterer().MustRegister(storesource.FreshnessCollector{Store: st, MaxStaleness: o.MaxStaleness, Now: time.Now})
	return &source{
		values: storesource.New(st, o.MaxStaleness, o.TTFTWindow, nil),
		loop: func(ctx context.Context, ready func()) {
			if token != nil {
				go token.Run(ctx)
			}
			log.Info("starting the scrape loop", "interval", o.ScrapeInterval)
			g.Cycle(ctx)
			ready()
			g.Run(ctx)
		},
	}, nil
}

// prometheusSource queries --prometheus-url; nothing is scraped. The
// server is not contacted here: Prometheus down is an error of each API
// request, not of the adapter's start.
func (o *Options) prometheusSource(pods coreinformers.PodInformer, log *slog.Logger) (*source, error) {
	queries, err := promsource.LoadQueries(o.Prometheus.Queries)
	if err != nil {
		return nil, err
	}
	httpCfg := config.DefaultHTTPClientConfig
	if o.Prometheus.BearerTokenFile != "" {
		httpCfg.Authorization = &config.Authorization{Type: "Bearer", CredentialsFile: o.Prometheus.BearerTokenFile}
	}
	httpCfg.TLSConfig.CAFile = o.Prometheus.CAFile
	var podsIn func(string) int
	if pods != nil {
		counter, err := countPods(pods.Informer())
		if err != nil {
			return nil, err
		}
		podsIn = counter.in
	}
	src, err := promsource.New(promsource.Config{
		URL: o.Prometheus.URL, HTTP: httpCfg, Timeout: o.Prometheus.Timeout,
		MaxStaleness: o.MaxStaleness, TTFTWindow: o.TTFTWindow, Queries: queries,
		ReuseFor: o.Prometheus.ScrapeInterval / promsource.DefaultReuseFraction, PodsIn: podsIn,
		NamesEvery: o.Prometheus.NamesEvery, Log: log.With("source", "prometheus"), Registerer: o.metricsRegisterer(),
	})
	if err != nil {
		return nil, fmt.Errorf("--source=prometheus: %w", err)
	}
	return &source{
		values: src,
		loop: func(_ context.Context, ready func()) {
			log.Info("reading values from prometheus", "url", o.Prometheus.URL, "timeout", o.Prometheus.Timeout)
			ready()
		},
	}, nil
}

// podCounter counts each namespace's pods from the pod informer's events:
// the PromQL source asks for a whole namespace when a request's pods are
// most of it.
type podCounter struct {
	mu sync.RWMutex
	n  map[string]int
}

func countPods(inf cache.SharedInformer) (*podCounter, error) {
	c := &podCounter{n: map[string]int{}}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.add(obj, 1) },
		DeleteFunc: func(obj any) { c.add(obj, -1) },
	})
	if err != nil {
		return nil, fmt.Errorf("count pods: %w", err)
	}
	return c, nil
}

func (c *podCounter) add(obj any, d int) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[p.Namespace] += d; c.n[p.Namespace] <= 0 {
		delete(c.n, p.Namespace)
	}
}

// in returns the pods of namespace.
func (c *podCounter) in(namespace string) int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.n[namespace]
}
