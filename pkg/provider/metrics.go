package provider

import (
	"github.com/prometheus/client_golang/prometheus"
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
