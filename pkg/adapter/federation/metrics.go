package federation

import (
	"github.com/prometheus/client_golang/prometheus"
)

// API label values.
const (
	apiCustom   = "custom"
	apiExternal = "external"
)

// Results of a forwarded request, as counted.
const (
	resultOK           = "ok"
	resultNotFound     = "not_found"
	resultForbidden    = "forbidden"
	resultUnauthorized = "unauthorized"
	resultTimeout      = "timeout"
	resultUnavailable  = "unavailable"
	resultError        = "error"
)

// Metrics are the federation's own series. Forwarded requests are not
// labelled by metric name: names not served by gpuscale come from any
// caller, and would make the series unbounded.
type Metrics struct {
	requests          *prometheus.CounterVec
	duration          *prometheus.HistogramVec
	discoveryUp       *prometheus.GaugeVec
	discoveryFailures *prometheus.CounterVec
	discovered        *prometheus.GaugeVec
}

// NewMetrics returns the collectors; register them with Collectors.
func NewMetrics() *Metrics {
	return &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscale_adapter_forwarded_requests_total",
			Help: "Metric API requests for names gpuscale does not serve, forwarded to --forward-to, by API (custom, external) and result (ok, not_found, forbidden, unauthorized, timeout, unavailable, error).",
		}, []string{"api", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gpuscale_adapter_forwarded_request_duration_seconds",
			Help:    "Time from forwarding a metric API request to --forward-to until its answer (or failure), by API.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"api"}),
		discoveryUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpuscale_adapter_forward_discovery_up",
			Help: "1 when the last discovery of --forward-to's metric names for the API succeeded and its names are listed; 0 when it failed and only gpuscale's own names are listed.",
		}, []string{"api"}),
		discoveryFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscale_adapter_forward_discovery_failures_total",
			Help: "Failed discoveries of --forward-to's metric names, by API.",
		}, []string{"api"}),
		discovered: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpuscale_adapter_forward_discovered_metrics",
			Help: "Metrics of --forward-to listed in gpuscale's discovery (after gpuscale's own names won), by API.",
		}, []string{"api"}),
	}
}

// Collectors returns everything to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.duration, m.discoveryUp, m.discoveryFailures, m.discovered}
}
