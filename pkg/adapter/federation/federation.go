// Package federation forwards metric API requests for names gpuscale does
// not serve to another metrics API server (prometheus-adapter, KEDA's
// metrics server, a vendor's adapter), so one APIService per group can
// serve both. The caller's identity travels as the kube-aggregator sends
// it (a front-proxy client certificate and X-Remote-* headers), so the
// backend's own delegated authorization decides what the caller may read.
// gpuscale's own names always win: a name gpuscale serves is never
// forwarded, and the backend's metric of that name is not listed.
package federation

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	"k8s.io/metrics/pkg/apis/external_metrics"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"
)

// Provider serves the local provider's metrics and forwards every other
// name to the backend.
type Provider struct {
	local         cmprovider.MetricsProvider
	backend       *Backend
	metrics       *Metrics
	log           *slog.Logger
	customNames   map[string]bool
	externalNames map[string]bool
	// ownCustom and ownExternal are the local provider's lists, which are
	// fixed once it is built.
	ownCustom   []cmprovider.CustomMetricInfo
	ownExternal []cmprovider.ExternalMetricInfo

	mu sync.RWMutex
	// The backend's names from the last discovery, nil while the last
	// one failed: a name is listed only while the backend confirms it.
	custom   []cmprovider.CustomMetricInfo
	external []cmprovider.ExternalMetricInfo
}

var _ cmprovider.MetricsProvider = (*Provider)(nil)

// New wraps local; metrics may be nil, and log (nil: slog's default).
func New(local cmprovider.MetricsProvider, backend *Backend, metrics *Metrics, log *slog.Logger) *Provider {
	if metrics == nil {
		metrics = NewMetrics()
	}
	if log == nil {
		log = slog.Default()
	}
	p := &Provider{local: local, backend: backend, metrics: metrics, log: log,
		customNames: map[string]bool{}, externalNames: map[string]bool{},
		ownCustom: local.ListAllMetrics(), ownExternal: local.ListAllExternalMetrics()}
	for _, m := range p.ownCustom {
		p.customNames[m.Metric] = true
	}
	for _, m := range p.ownExternal {
		p.externalNames[m.Metric] = true
	}
	for _, api := range []string{apiCustom, apiExternal} {
		metrics.discoveryUp.WithLabelValues(api).Set(0)
		metrics.discoveryFailures.WithLabelValues(api)
		metrics.discovered.WithLabelValues(api).Set(0)
	}
	return p
}

// Run refreshes the backend's names every interval until ctx is done.
func (p *Provider) Run(ctx context.Context, interval time.Duration) {
	wait.JitterUntilWithContext(ctx, p.Refresh, interval, 0.1, true)
}

// Refresh discovers the backend's names once. A failed discovery drops
// the backend's names of that API from the lists, says so in a log and in
// gpuscale_adapter_forward_discovery_up, and leaves gpuscale's own names
// and request forwarding (which does not depend on discovery) untouched.
func (p *Provider) Refresh(ctx context.Context) {
	ctx = discoveryContext(ctx)
	custom, err := p.backend.discoverCustom(ctx)
	p.settle(apiCustom, err, func() int {
		p.custom = nil
		if err == nil {
			p.custom = mergeCustom(nil, custom, p.customNames)
		}
		return len(p.custom)
	})
	external, err := p.backend.discoverExternal(ctx)
	p.settle(apiExternal, err, func() int {
		p.external = nil
		if err == nil {
			p.external = mergeExternal(nil, external, p.externalNames)
		}
		return len(p.external)
	})
}

func (p *Provider) settle(api string, err error, update func() int) {
	p.mu.Lock()
	n := update()
	p.mu.Unlock()
	if err != nil {
		p.metrics.discoveryUp.WithLabelValues(api).Set(0)
		p.metrics.discoveryFailures.WithLabelValues(api).Inc()
		p.log.Error("Discovery of the forward backend's metrics failed; listing only gpuscale's own until it succeeds", "err", err, "api", api, "backend", p.backend.url)
	} else {
		p.metrics.discoveryUp.WithLabelValues(api).Set(1)
		// klog's V(4), as it was logged before pkg/logging: -v=4 shows it.
		p.log.Log(context.Background(), slog.Level(-4), "Discovered the forward backend's metrics", "api", api, "backend", p.backend.url, "metrics", n)
	}
	p.metrics.discovered.WithLabelValues(api).Set(float64(n))
}

// observe counts one forwarded request.
func (p *Provider) observe(api string, start time.Time, err error) {
	p.metrics.requests.WithLabelValues(api, resultOf(err)).Inc()
	p.metrics.duration.WithLabelValues(api).Observe(time.Since(start).Seconds())
	if err != nil {
		p.log.Log(context.Background(), slog.Level(-2), "Forwarded metric request failed", "api", api, "backend", p.backend.url, "err", err)
	}
}

// GetMetricByName implements cmprovider.CustomMetricsProvider.
func (p *Provider) GetMetricByName(ctx context.Context, name types.NamespacedName, info cmprovider.CustomMetricInfo, metricSelector labels.Selector) (*custom_metrics.MetricValue, error) {
	if p.customNames[info.Metric] {
		return p.local.GetMetricByName(ctx, name, info, metricSelector)
	}
	start := time.Now()
	mv, err := p.forwardByName(ctx, name, info, metricSelector)
	p.observe(apiCustom, start, err)
	return mv, err
}

func (p *Provider) forwardByName(ctx context.Context, name types.NamespacedName, info cmprovider.CustomMetricInfo, metricSelector labels.Selector) (*custom_metrics.MetricValue, error) {
	list, err := p.backend.customMetric(ctx, info.GroupResource, name.Namespace, name.Name, info.Metric, nil, metricSelector)
	if err != nil {
		return nil, err
	}
	if len(list.Items) != 1 {
		return nil, p.backend.wrongCount(len(list.Items))
	}
	if err := p.backend.checkName(name.Name, list.Items[0]); err != nil {
		return nil, err
	}
	return &list.Items[0], nil
}

// GetMetricBySelector implements cmprovider.CustomMetricsProvider.
func (p *Provider) GetMetricBySelector(ctx context.Context, namespace string, selector labels.Selector, info cmprovider.CustomMetricInfo, metricSelector labels.Selector) (*custom_metrics.MetricValueList, error) {
	if p.customNames[info.Metric] {
		return p.local.GetMetricBySelector(ctx, namespace, selector, info, metricSelector)
	}
	start := time.Now()
	list, err := p.backend.customMetric(ctx, info.GroupResource, namespace, "*", info.Metric, selector, metricSelector)
	p.observe(apiCustom, start, err)
	return list, err
}

// GetExternalMetric implements cmprovider.ExternalMetricsProvider.
func (p *Provider) GetExternalMetric(ctx context.Context, namespace string, metricSelector labels.Selector, info cmprovider.ExternalMetricInfo) (*external_metrics.ExternalMetricValueList, error) {
	if p.externalNames[info.Metric] {
		return p.local.GetExternalMetric(ctx, namespace, metricSelector, info)
	}
	start := time.Now()
	list, err := p.backend.externalMetric(ctx, namespace, info.Metric, metricSelector)
	p.observe(apiExternal, start, err)
	return list, err
}

// ListAllMetrics implements cmprovider.CustomMetricsProvider: gpuscale's
// metrics, then the backend's from its last successful discovery.
func (p *Provider) ListAllMetrics() []cmprovider.CustomMetricInfo {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return mergeCustom(p.ownCustom, p.custom, nil)
}

// ListAllExternalMetrics implements cmprovider.ExternalMetricsProvider.
func (p *Provider) ListAllExternalMetrics() []cmprovider.ExternalMetricInfo {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return mergeExternal(p.ownExternal, p.external, nil)
}
