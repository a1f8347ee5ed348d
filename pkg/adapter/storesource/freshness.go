package storesource

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

var (
	freshDesc = prometheus.NewDesc("gpuscale_adapter_metric_fresh_pods",
		"Pods with a fresh value of each served pod metric (latency quantiles: pods with a fresh histogram of the kind).",
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
	for _, m := range provider.Metrics() {
		cv := cov[m.Signal]
		if m.IsQuantile() {
			cv = cov[int(signal.NumSignals)+int(m.Hist)]
		}
		ch <- prometheus.MustNewConstMetric(freshDesc, prometheus.GaugeValue, float64(cv.Fresh), m.Name)
		if !cv.Newest.IsZero() {
			ch <- prometheus.MustNewConstMetric(ageDesc, prometheus.GaugeValue, now.Sub(cv.Newest).Seconds(), m.Name)
		}
	}
}
