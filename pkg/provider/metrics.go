package provider

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscale/gpuscale/pkg/store"
)

// RequestCounter is the Observer the adapter registers: requests by API,
// metric name, resource and result, so a metric that goes missing shows up
// by name as not_found.
type RequestCounter struct{ vec *prometheus.CounterVec }

// NewRequestCounter returns an unregistered counter.
func NewRequestCounter() *RequestCounter {
	return &RequestCounter{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpuscale_adapter_metric_requests_total",
		Help: "Metric API requests by API (custom, external), metric, resource and result (ok, not_found, error).",
	}, []string{"api", "metric", "resource", "result"})}
}

// Observe implements Observer.
func (c *RequestCounter) Observe(api, metric, resource, result string) {
	c.vec.WithLabelValues(api, metric, resource, result).Inc()
}

// Describe implements prometheus.Collector.
func (c *RequestCounter) Describe(ch chan<- *prometheus.Desc) { c.vec.Describe(ch) }

// Collect implements prometheus.Collector.
func (c *RequestCounter) Collect(ch chan<- prometheus.Metric) { c.vec.Collect(ch) }

var (
	freshDesc = prometheus.NewDesc("gpuscale_adapter_metric_fresh_pods",
		"Pods with a fresh value of each served pod metric (TTFT quantiles: pods with a fresh TTFT histogram).",
		[]string{"metric"}, nil)
	ageDesc = prometheus.NewDesc("gpuscale_adapter_metric_newest_sample_age_seconds",
		"Age of the newest sample behind each served pod metric; absent when no pod has a fresh value.",
		[]string{"metric"}, nil)
)

// FreshnessCollector reports, per served metric, how much fresh data backs
// it. It reads the store at scrape time.
type FreshnessCollector struct {
	Store        *store.Store
	MaxStaleness time.Duration
	Now          func() time.Time
}

// Describe implements prometheus.Collector.
func (c FreshnessCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- freshDesc
	ch <- ageDesc
}

// Collect implements prometheus.Collector.
func (c FreshnessCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.Now()
	cov := c.Store.PodCoverage(now, c.MaxStaleness)
	for _, d := range podMetrics {
		cv := cov[d.signal]
		if d.isTTFT() {
			cv = cov[store.NumSignals]
		}
		ch <- prometheus.MustNewConstMetric(freshDesc, prometheus.GaugeValue, float64(cv.Fresh), d.name)
		if !cv.Newest.IsZero() {
			ch <- prometheus.MustNewConstMetric(ageDesc, prometheus.GaugeValue, now.Sub(cv.Newest).Seconds(), d.name)
		}
	}
}
