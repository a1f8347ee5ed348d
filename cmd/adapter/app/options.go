// Package app wires the adapter's flags to its pipeline: informers ->
// discovery -> scrape -> store -> custom/external metrics API.
package app

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/gpuscale/gpuscale/pkg/adapter/discovery"
	"github.com/gpuscale/gpuscale/pkg/adapter/kedascaler"
	"github.com/gpuscale/gpuscale/pkg/adapter/scrape"
	"github.com/gpuscale/gpuscale/pkg/signal/capacity"
)

// Options are the adapter's own flags; the API server's (TLS, delegated
// authn/authz, kubeconfigs) come from custom-metrics-apiserver.
type Options struct {
	// registerer takes the adapter's own metrics (nil: the API server's
	// legacy registry, which its /metrics serves). A test gives each run
	// a registry of its own, so the same test can run twice in a process.
	registerer prometheus.Registerer

	Source           string
	ScrapeInterval   time.Duration
	ScrapeTimeout    time.Duration
	ScrapeWorkers    int
	MaxIdleConns     int
	MaxScrapeBytes   int64
	MaxInflightBytes int64
	MaxStaleness     time.Duration
	TTFTWindow       time.Duration
	// LatencyWindowIdle is how long a namespace's pods keep parsing a
	// histogram family, and keep a TTFT or ITL window, after the last read
	// of it (0: always).
	LatencyWindowIdle time.Duration
	// CapacityTTFTObjective is the TTFT the capacity signal's p90 is
	// held within; its prefill term sizes from it.
	CapacityTTFTObjective time.Duration
	// CapacityITLObjective is the inter-token latency the capacity
	// signal's p90 is held within (its ITL term); 0: no ITL term.
	CapacityITLObjective time.Duration
	// CapacityTimeScale is capacity.Config.TimeScale: 1 but in replays
	// of simulated servers that run faster than real time.
	CapacityTimeScale float64
	// CapacityMaxWorkloadsPerNamespace and CapacityMaxWorkloads bound the
	// workloads and models the capacity signal keeps state for
	// (capacity.Config.MaxTargetsPerNamespace, MaxTargets).
	CapacityMaxWorkloadsPerNamespace, CapacityMaxWorkloads int
	ExporterSelector                                       string
	ExporterPort                                           int
	ExporterPath                                           string
	// ExporterTokenFile holds the exporters' reserved-lane token, and
	// ExporterTokenSecret (NAMESPACE/NAME) is the Secret the adapter makes
	// for it when absent (exportertoken.go).
	ExporterTokenFile   string
	ExporterTokenSecret string

	// ExporterNamespace and ExporterDaemonSet say which pods are exporters:
	// those of that DaemonSet in that namespace; the selector only narrows.
	ExporterNamespace string
	ExporterDaemonSet string
	// ScrapeHostNetwork lets inference pods on the host network be scraped.
	ScrapeHostNetwork bool
	// MaxTargetsPerNamespace caps the inference targets of one namespace.
	MaxTargetsPerNamespace int
	// ScrapePrometheusAnnotations honours prometheus.io/* on pods, in the
	// namespaces PrometheusAnnotationsNamespaces selects (empty: all).
	ScrapePrometheusAnnotations     bool
	PrometheusAnnotationsNamespaces string

	MemoryLimitRatio float64
	// GCPercent is the garbage collector's target (GOGC) unless the
	// environment sets one.
	GCPercent int
	// ResponseCompression gzips large answers for clients that ask
	// (responses.go).
	ResponseCompression bool
	ScaleDown           ScaleDownOptions
	Prometheus          PrometheusOptions

	// Forward: federation with another metrics API server (forward.go).
	Forward    ForwardOptions
	KEDAScaler KEDAScalerOptions
	Certs      CertOptions
}

// PrometheusOptions configure --source=prometheus.
type PrometheusOptions struct {
	URL             string
	Queries         string
	Timeout         time.Duration
	BearerTokenFile string
	CAFile          string
	// ScrapeInterval is how often the server's data change: an answer is
	// reused by identical queries for promsource.DefaultReuseFraction of
	// it. 0: answers are only shared while in flight.
	ScrapeInterval time.Duration
	// NamesEvery is how often the server is asked which series names it
	// has, so that the default queries read those alone; 0: never.
	NamesEvery time.Duration
}

// Source names.
const (
	SourceEmbedded   = "embedded"
	SourcePrometheus = "prometheus"
)

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		Source:                           SourceEmbedded,
		ScrapeInterval:                   5 * time.Second,
		ScrapeWorkers:                    64,
		MaxIdleConns:                     scrape.DefaultMaxIdleConns,
		MaxScrapeBytes:                   scrape.DefaultMaxBytes,
		MaxInflightBytes:                 scrape.DefaultMaxInflightBytes,
		TTFTWindow:                       60 * time.Second,
		LatencyWindowIdle:                10 * time.Minute,
		CapacityTTFTObjective:            time.Second,
		CapacityTimeScale:                1,
		CapacityMaxWorkloadsPerNamespace: capacity.DefaultMaxTargetsPerNamespace,
		CapacityMaxWorkloads:             capacity.DefaultMaxTargets,
		ExporterSelector:                 "app.kubernetes.io/name=gpuscale-exporter",
		ExporterPort:                     9400,
		ExporterPath:                     "/metrics",

		// The plain manifests' names (release and namespace gpuscale).
		ExporterNamespace:      "gpuscale",
		ExporterDaemonSet:      "gpuscale-exporter",
		MaxTargetsPerNamespace: 2000,

		MemoryLimitRatio: 0.9,
		GCPercent:        defaultGCPercent,
		ScaleDown:        defaultScaleDownOptions(),
		Prometheus:       PrometheusOptions{Timeout: 5 * time.Second, ScrapeInterval: 30 * time.Second, NamesEvery: time.Minute},

		Forward:    defaultForwardOptions(),
		KEDAScaler: KEDAScalerOptions{CheckInterval: kedascaler.DefaultCheckInterval, Authorization: AuthorizeSubjectAccessReview},
		Certs:      defaultCertOptions(),
	}
}

// AddFlags registers the options.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Source, "source", o.Source, "Where signals come from: embedded (the adapter scrapes exporters and inference pods itself) or prometheus (PromQL queries to --prometheus-url; nothing is scraped).")
	fs.StringVar(&o.Prometheus.URL, "prometheus-url", o.Prometheus.URL, "Base URL of the Prometheus-compatible HTTP API for --source=prometheus, e.g. http://prometheus.monitoring:9090.")
	fs.StringVar(&o.Prometheus.Queries, "prometheus-queries", o.Prometheus.Queries, "YAML file of PromQL templates overriding the defaults (docs/metrics.md); empty: the defaults.")
	fs.DurationVar(&o.Prometheus.Timeout, "prometheus-timeout", o.Prometheus.Timeout, "Deadline of one PromQL query.")
	fs.StringVar(&o.Prometheus.BearerTokenFile, "prometheus-bearer-token-file", o.Prometheus.BearerTokenFile, "File holding the bearer token sent to Prometheus (re-read on every request).")
	fs.StringVar(&o.Prometheus.CAFile, "prometheus-ca-file", o.Prometheus.CAFile, "CA bundle verifying Prometheus's TLS certificate; empty: the system roots.")
	fs.DurationVar(&o.Prometheus.ScrapeInterval, "prometheus-scrape-interval", o.Prometheus.ScrapeInterval, "How often Prometheus scrapes the series the adapter reads. Identical queries (HPAs, KEDA, dashboards asking at once) share one answer, reused for a quarter of this; 0: shared only while in flight.")
	fs.DurationVar(&o.Prometheus.NamesEvery, "prometheus-names-refresh", o.Prometheus.NamesEvery, "How often Prometheus is asked which of the series names the default queries read it has (its label values API); the defaults then read those alone, sparing it the engines and dcgm-exporter schemas the cluster does not run. A name that appears is read from the next refresh on. Templates of --prometheus-queries are never changed. 0: never, every default reads every name.")
	fs.DurationVar(&o.ScrapeInterval, "scrape-interval", o.ScrapeInterval, "How often every target is scraped.")
	fs.DurationVar(&o.ScrapeTimeout, "scrape-timeout", o.ScrapeTimeout, "Deadline of one target scrape (default: 80% of --scrape-interval, at most 10s).")
	fs.IntVar(&o.ScrapeWorkers, "scrape-workers", o.ScrapeWorkers, "Targets scraped concurrently.")
	fs.IntVar(&o.MaxIdleConns, "scrape-max-idle-conns", o.MaxIdleConns, "Connections to targets kept alive between scrapes, over all targets; beyond as many targets, scrapes reconnect. Each costs the kernel about 4 KiB of the container's memory, which the Go memory limit (--memory-limit-ratio) leaves out.")
	fs.Int64Var(&o.MaxScrapeBytes, "max-scrape-bytes", o.MaxScrapeBytes, "Largest accepted response body of one target, after decompression.")
	fs.Int64Var(&o.MaxInflightBytes, "scrape-max-inflight-bytes", o.MaxInflightBytes, "Estimated memory all scrapes may hold parsed at once; half is split evenly among --scrape-workers, half shared. A scrape that needs more than it can get fails with reason limit (docs/performance.md).")
	fs.DurationVar(&o.MaxStaleness, "max-staleness", o.MaxStaleness, "Age past which a pod's newest sample gives no value (default: three scrape intervals).")
	fs.DurationVar(&o.TTFTWindow, "ttft-window", o.TTFTWindow, "Window of the time-to-first-token quantiles, and of the prefill times the capacity signal reads.")
	fs.DurationVar(&o.LatencyWindowIdle, "latency-window-idle", o.LatencyWindowIdle, "How long a namespace's pods keep what was read of their histograms after the last read: the TTFT, ITL and prefill-time families are parsed only once a reader there reads them (the capacity signal reads all three, a quantile its own), and a TTFT or ITL window is kept only from the first read of those quantiles, which is answered once the window spans --ttft-window; otherwise each pod's newest histogram alone, all the capacity signal reads. 0: every family is parsed and every window kept from the start.")
	fs.Float64Var(&o.CapacityTimeScale, "capacity-time-scale", o.CapacityTimeScale, "Seconds on the inference servers' clocks per second of the adapter's. For replays whose simulated servers run faster than real time; 1 on a cluster.")
	_ = fs.MarkHidden("capacity-time-scale")
	fs.DurationVar(&o.CapacityTTFTObjective, "capacity-ttft-objective", o.CapacityTTFTObjective, "TTFT objective the capacity signal (inference_capacity_utilization) holds the p90 within: how busy a replica's prefill may run follows from it.")
	fs.IntVar(&o.CapacityMaxWorkloadsPerNamespace, "capacity-max-workloads-per-namespace", o.CapacityMaxWorkloadsPerNamespace, "Workloads and models of one namespace the capacity signal keeps state for (a few KiB each); past it, new ones get no value until old ones are forgotten. A bound on what one tenant's readers can make the adapter hold.")
	fs.IntVar(&o.CapacityMaxWorkloads, "capacity-max-workloads", o.CapacityMaxWorkloads, "Workloads and models of all namespaces the capacity signal keeps state for.")
	fs.DurationVar(&o.CapacityITLObjective, "capacity-itl-objective", o.CapacityITLObjective, "Inter-token latency objective the capacity signal holds the p90 within, for decode-bound models: how many sequences a replica decodes follows from it. 0: no ITL term.")
	// --window sized a ring of samples only TTFT quantiles read, and only
	// over --ttft-window: the store now keeps what that window needs, and
	// the flag is accepted, for existing deployments, and ignored.
	var window time.Duration
	fs.DurationVar(&window, "window", 0, "Ignored: the history kept per pod follows --ttft-window.")
	_ = fs.MarkDeprecated("window", "it has no effect: the history kept per pod follows --ttft-window")
	fs.StringVar(&o.ExporterSelector, "exporter-selector", o.ExporterSelector, "Label selector of the GPU exporter pods; only pods of --exporter-daemonset in --exporter-namespace qualify.")
	fs.StringVar(&o.ExporterNamespace, "exporter-namespace", o.ExporterNamespace, "Namespace of the exporter DaemonSet: pods elsewhere are never scraped as exporters, whatever their labels. '*' trusts that DaemonSet's pods in every namespace, so anyone who may create a DaemonSet of that name could report any pod's GPUs.")
	fs.StringVar(&o.ExporterDaemonSet, "exporter-daemonset", o.ExporterDaemonSet, "Name of the DaemonSet (apps) that must control an exporter pod.")
	fs.BoolVar(&o.ScrapeHostNetwork, "scrape-host-network", o.ScrapeHostNetwork, "Scrape annotated inference pods on the host network. Their IP is the node's, so their annotations could point the adapter at any port of the node; off, they are reported and skipped.")
	fs.IntVar(&o.MaxTargetsPerNamespace, "max-targets-per-namespace", o.MaxTargetsPerNamespace, "Most inference pods scraped in one namespace; beyond it, those last by name are reported and skipped. 0: no cap.")
	fs.BoolVar(&o.ScrapePrometheusAnnotations, "scrape-prometheus-annotations", o.ScrapePrometheusAnnotations, "Also scrape pods annotated prometheus.io/scrape=true (with prometheus.io/port, /path, /scheme) that carry no gpuscale.io/scrape annotation. Off, only gpuscale.io/* annotations ask the adapter to scrape a pod.")
	fs.StringVar(&o.PrometheusAnnotationsNamespaces, "prometheus-annotations-namespace-selector", o.PrometheusAnnotationsNamespaces, "Label selector of the namespaces whose pods' prometheus.io/* annotations count with --scrape-prometheus-annotations; empty: every namespace.")
	fs.IntVar(&o.ExporterPort, "exporter-port", o.ExporterPort, "Port of the exporter's metrics endpoint.")
	fs.StringVar(&o.ExporterPath, "exporter-path", o.ExporterPath, "Path of the exporter's metrics endpoint.")
	fs.StringVar(&o.ExporterTokenFile, "exporter-token-file", o.ExporterTokenFile, "File holding the exporters' reserved-lane token (their --web.reserved-token-file), sent to exporter pods alone as a bearer token, so that a flood of other clients cannot make the adapter's scrapes fail. Re-read when it appears or changes (an optional Secret volume): none is sent while it holds no token of 16 characters or more. Empty: none.")
	fs.StringVar(&o.ExporterTokenSecret, "exporter-token-secret", o.ExporterTokenSecret, "NAMESPACE/NAME of the Secret holding that token (key token), which the adapter creates with 32 random bytes (base64url) when it does not exist, and never changes when it does: mount it as --exporter-token-file, and in the exporters. Replicas share it without a leader; needs get on it and create on Secrets. Empty: the Secret is yours to make.")
	fs.IntVar(&o.GCPercent, "gc-percent", o.GCPercent, "The garbage collector's target (GOGC): how far the heap grows past what is live before a collection, in percent. Most of the adapter's heap lives long, so Go's default of 100 holds about as much garbage as state; lower costs a little CPU for less memory (docs/performance.md). A GOGC environment variable wins.")
	fs.BoolVar(&o.ResponseCompression, "response-compression", o.ResponseCompression, "Gzip answers over 128 KiB for clients that accept it (Kubernetes' APIResponseCompression). Off by default: the adapter's clients reach it through the aggregator inside the cluster, where gzip costs more CPU than the bytes it saves (docs/performance.md).")
	fs.Float64Var(&o.MemoryLimitRatio, "memory-limit-ratio", o.MemoryLimitRatio, "Share of the container's memory limit (from its cgroup) given to the Go runtime as its soft limit (GOMEMLIMIT), so that garbage collection tightens before the OOM killer acts; 0 disables. An explicit GOMEMLIMIT wins.")
	o.ScaleDown.AddFlags(fs)

	o.Forward.AddFlags(fs)
	o.KEDAScaler.AddFlags(fs)
	o.Certs.AddFlags(fs)
}

// Complete fills derived defaults.
func (o *Options) Complete() {
	if o.ScrapeTimeout == 0 {
		o.ScrapeTimeout = min(o.ScrapeInterval*8/10, 10*time.Second)
	}
	if o.MaxStaleness == 0 {
		o.MaxStaleness = 3 * o.ScrapeInterval
	}
}

// minInflightPerWorker is the least --scrape-max-inflight-bytes per worker:
// shares of 256 KiB hold a fully parsed vLLM exposition (about 200 KiB).
const minInflightPerWorker = 512 << 10

// Validate reports every invalid option at once.
func (o *Options) Validate() error {
	var errs []error
	switch o.Source {
	case SourceEmbedded:
	case SourcePrometheus:
		errs = append(errs, o.Prometheus.validate()...)
	default:
		errs = append(errs, fmt.Errorf("--source must be embedded or prometheus, got %q", o.Source))
	}
	errs = append(errs, o.validateScrape()...)
	errs = append(errs, o.validateCapacity()...)
	errs = append(errs, o.validateDiscovery()...)
	errs = append(errs, o.ScaleDown.validate()...)
	errs = append(errs, o.Forward.validate()...)
	errs = append(errs, o.KEDAScaler.validate(o.Certs.KEDAClientSecret != "")...)
	errs = append(errs, o.Certs.validate(&o.KEDAScaler)...)
	errs = append(errs, o.validateExporterToken()...)
	return errors.Join(errs...)
}

// validateScrape checks the scrape loop's timing and its bounds on
// memory, connections and bytes.
func (o *Options) validateScrape() []error {
	var errs []error
	if o.LatencyWindowIdle < 0 {
		errs = append(errs, fmt.Errorf("--latency-window-idle must not be negative, got %v", o.LatencyWindowIdle))
	}
	if o.ScrapeInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("--scrape-interval must be at least 100ms, got %v", o.ScrapeInterval))
	}
	if o.ScrapeTimeout <= 0 || o.ScrapeTimeout > o.ScrapeInterval {
		errs = append(errs, fmt.Errorf("--scrape-timeout must be positive and at most --scrape-interval, got %v", o.ScrapeTimeout))
	}
	if o.GCPercent < 10 {
		errs = append(errs, fmt.Errorf("--gc-percent must be at least 10, got %d", o.GCPercent))
	}
	if o.MemoryLimitRatio < 0 || o.MemoryLimitRatio > 1 || math.IsNaN(o.MemoryLimitRatio) {
		errs = append(errs, fmt.Errorf("--memory-limit-ratio must be in [0, 1], got %v", o.MemoryLimitRatio))
	}
	if o.ScrapeWorkers < 1 {
		errs = append(errs, errors.New("--scrape-workers must be at least 1"))
	}
	if o.MaxIdleConns < 1 {
		errs = append(errs, errors.New("--scrape-max-idle-conns must be at least 1"))
	}
	if o.MaxScrapeBytes < 1024 {
		errs = append(errs, errors.New("--max-scrape-bytes must be at least 1024"))
	}
	// Below this, a worker's share would not hold one parsed vLLM
	// exposition, and every scrape would borrow.
	if minInflight := int64(max(o.ScrapeWorkers, 1)) * minInflightPerWorker; o.MaxInflightBytes < minInflight {
		errs = append(errs, fmt.Errorf("--scrape-max-inflight-bytes must be at least %d (%d KiB per scrape worker), got %d",
			minInflight, minInflightPerWorker>>10, o.MaxInflightBytes))
	}
	if o.MaxStaleness < o.ScrapeInterval {
		errs = append(errs, fmt.Errorf("--max-staleness (%v) must be at least --scrape-interval", o.MaxStaleness))
	}
	if o.TTFTWindow < 2*o.ScrapeInterval {
		errs = append(errs, fmt.Errorf("--ttft-window (%v) needs at least two scrapes", o.TTFTWindow))
	}
	return errs
}

// validateCapacity checks the capacity signal's objectives and bounds.
func (o *Options) validateCapacity() []error {
	var errs []error
	if !(o.CapacityTimeScale > 0) || math.IsInf(o.CapacityTimeScale, 0) {
		errs = append(errs, fmt.Errorf("--capacity-time-scale must be positive and finite, got %v", o.CapacityTimeScale))
	}
	if o.CapacityTTFTObjective <= 0 {
		errs = append(errs, fmt.Errorf("--capacity-ttft-objective must be positive, got %v", o.CapacityTTFTObjective))
	}
	if o.CapacityMaxWorkloadsPerNamespace < 1 || o.CapacityMaxWorkloads < o.CapacityMaxWorkloadsPerNamespace {
		errs = append(errs, fmt.Errorf("--capacity-max-workloads-per-namespace must be at least 1 and at most --capacity-max-workloads, got %d and %d", o.CapacityMaxWorkloadsPerNamespace, o.CapacityMaxWorkloads))
	}
	if o.CapacityITLObjective < 0 {
		errs = append(errs, fmt.Errorf("--capacity-itl-objective must not be negative, got %v", o.CapacityITLObjective))
	}
	return errs
}

// validateDiscovery checks how exporters and annotated pods are found.
func (o *Options) validateDiscovery() []error {
	var errs []error
	if _, err := labels.Parse(o.ExporterSelector); err != nil {
		errs = append(errs, fmt.Errorf("--exporter-selector: %w", err))
	}
	if _, err := labels.Parse(o.PrometheusAnnotationsNamespaces); err != nil {
		errs = append(errs, fmt.Errorf("--prometheus-annotations-namespace-selector: %w", err))
	} else if o.PrometheusAnnotationsNamespaces != "" && !o.ScrapePrometheusAnnotations {
		errs = append(errs, errors.New("--prometheus-annotations-namespace-selector needs --scrape-prometheus-annotations"))
	}
	if o.ExporterPort < 1 || o.ExporterPort > 65535 {
		errs = append(errs, fmt.Errorf("--exporter-port %d is not a port", o.ExporterPort))
	}
	if err := discovery.CheckPath(o.ExporterPath); err != nil {
		errs = append(errs, fmt.Errorf("--exporter-path: %w", err))
	}
	if o.ExporterNamespace != discovery.AnyNamespace {
		for _, msg := range validation.IsDNS1123Label(o.ExporterNamespace) {
			errs = append(errs, fmt.Errorf("--exporter-namespace %q: %s (use '*' for every namespace)", o.ExporterNamespace, msg))
		}
	}
	for _, msg := range validation.IsDNS1123Subdomain(o.ExporterDaemonSet) {
		errs = append(errs, fmt.Errorf("--exporter-daemonset %q: %s", o.ExporterDaemonSet, msg))
	}
	if o.MaxTargetsPerNamespace < 0 {
		errs = append(errs, fmt.Errorf("--max-targets-per-namespace must be 0 (no cap) or more, got %d", o.MaxTargetsPerNamespace))
	}
	return errs
}

func (o *PrometheusOptions) validate() []error {
	var errs []error
	if o.URL == "" {
		errs = append(errs, errors.New("--prometheus-url is required with --source=prometheus"))
	} else if u, err := url.Parse(o.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("--prometheus-url %q is not an http(s) URL", o.URL))
	}
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--prometheus-timeout must be positive, got %v", o.Timeout))
	}
	if o.ScrapeInterval < 0 {
		errs = append(errs, fmt.Errorf("--prometheus-scrape-interval must be 0 or more, got %v", o.ScrapeInterval))
	}
	if o.NamesEvery < 0 {
		errs = append(errs, fmt.Errorf("--prometheus-names-refresh must be 0 or more, got %v", o.NamesEvery))
	}
	return errs
}

// needsNamespaces: the embedded source reads namespace labels only to
// select where prometheus.io/* annotations count.
func (o *Options) needsNamespaces() bool {
	return o.Source == SourceEmbedded && o.ScrapePrometheusAnnotations && o.PrometheusAnnotationsNamespaces != ""
}

// samplesKept is the ring size per pod: what a TTFT increase reads, one
// sample per interval over the TTFT window, plus one so the window's first
// increase has a left edge. Scalar signals are read from the newest sample
// only.
func (o *Options) samplesKept() int {
	return int(o.TTFTWindow/o.ScrapeInterval) + 2
}

// retainFor is how long a target that is no longer scraped keeps its
// samples: past the staleness bound and a scrape, none of them can be
// served again.
func (o *Options) retainFor() time.Duration {
	return o.MaxStaleness + o.ScrapeInterval
}

// capacityConfig is the capacity signal's configuration from the flags.
func (o *Options) capacityConfig() capacity.Config {
	cfg := capacity.DefaultConfig()
	cfg.Objective, cfg.Window, cfg.TimeScale = o.CapacityTTFTObjective, o.TTFTWindow, o.CapacityTimeScale
	cfg.ITLObjective = o.CapacityITLObjective
	cfg.MaxTargetsPerNamespace, cfg.MaxTargets = o.CapacityMaxWorkloadsPerNamespace, o.CapacityMaxWorkloads
	return cfg
}

// metricsRegisterer is where the adapter's own metrics are registered.
func (o *Options) metricsRegisterer() prometheus.Registerer {
	if o.registerer != nil {
		return o.registerer
	}
	return legacyregistry.Registerer()
}
