package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscale/gpuscale/pkg/exporter/podresources"
)

var (
	podResourcesFailuresDesc = prometheus.NewDesc("gpuscale_exporter_podresources_failures_total",
		"Failed kubelet pod-resources List calls; GPU metrics keep flowing without pod labels.", nil, nil)
	podResourcesSuccessDesc = prometheus.NewDesc("gpuscale_exporter_podresources_last_success_timestamp_seconds",
		"Unix time of the last successful kubelet pod-resources List call (0 if none).", nil, nil)
)

// podResourcesCollector exposes the watcher's own health.
type podResourcesCollector struct{ w *podresources.Watcher }

func newPodResourcesCollector(w *podresources.Watcher) prometheus.Collector {
	return podResourcesCollector{w}
}

func (c podResourcesCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- podResourcesFailuresDesc
	ch <- podResourcesSuccessDesc
}

func (c podResourcesCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.w.Stats()
	ch <- prometheus.MustNewConstMetric(podResourcesFailuresDesc, prometheus.CounterValue, float64(s.Failures))
	last := 0.0
	if !s.LastSuccess.IsZero() {
		last = float64(s.LastSuccess.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(podResourcesSuccessDesc, prometheus.GaugeValue, last)
}
