package gather

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscale/gpuscale/pkg/adapter/ingest"
	"github.com/gpuscale/gpuscale/pkg/adapter/scrape"
)

// gatherMetrics show the health of every target, so an operator can see
// why a pod's metric is missing.
type gatherMetrics struct {
	duration      *prometheus.HistogramVec
	targets       *prometheus.GaugeVec
	dialects      *prometheus.CounterVec
	cycle         prometheus.Histogram
	misconfigured prometheus.Gauge
}

func newGatherMetrics() *gatherMetrics {
	return &gatherMetrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gpuscale_adapter_scrape_duration_seconds",
			Help:    "Duration of one target scrape, by target kind.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 10),
		}, []string{"kind"}),
		targets: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpuscale_adapter_targets",
			Help: "Scrape targets discovered in the last cycle, by kind (exporter, inference).",
		}, []string{"kind"}),
		dialects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscale_adapter_inference_scrapes_total",
			Help: "Successful inference server and router scrapes by detected dialect.",
		}, []string{"dialect"}),
		cycle: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gpuscale_adapter_scrape_cycle_duration_seconds",
			Help:    "Duration of one discovery and scrape cycle over every target.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
		misconfigured: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpuscale_adapter_misconfigured_targets",
			Help: "Pods annotated for scraping whose annotations cannot be used (see the adapter's log).",
		}),
	}
}

func (m *gatherMetrics) register(r prometheus.Registerer, more ...prometheus.Collector) error {
	for _, c := range append([]prometheus.Collector{m.duration, m.targets, m.dialects, m.cycle, m.misconfigured}, more...) {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// failReasons are the values of the errors' reason label: the scraper's
// reasons, then those ingest rejects a whole scrape for.
var failReasons = [...]string{scrape.ReasonTimeout, scrape.ReasonConnect, scrape.ReasonHTTPStatus, scrape.ReasonTooLarge,
	scrape.ReasonParse, scrape.ReasonCanceled, scrape.ReasonOther, scrape.ReasonRedirect,
	scrape.ReasonLimit, scrape.ReasonCycleDeadline,
	reasonUnknownDialect, reasonNoGPUSeries, reasonDuplicateSeries, reasonInvalidHistogram, reasonTooManyModels}

// The reasons ingest rejects a whole scrape for (ingest.Reason).
const (
	reasonUnknownDialect   = ingest.ReasonUnknownDialect
	reasonNoGPUSeries      = ingest.ReasonNoGPUSeries
	reasonDuplicateSeries  = ingest.ReasonDuplicateSeries
	reasonInvalidHistogram = ingest.ReasonInvalidHistogram
	reasonTooManyModels    = ingest.ReasonTooManyModels
)

// failReason returns the index of reason in failReasons, "other" for one
// it does not know.
func failReason(reason string) int {
	if i := slices.Index(failReasons[:], reason); i >= 0 {
		return i
	}
	return slices.Index(failReasons[:], scrape.ReasonOther)
}

// rejectReason returns the index of reason in ingest.RejectReasons.
func rejectReason(reason string) int {
	if i := slices.Index(ingest.RejectReasons[:], reason); i >= 0 {
		return i
	}
	return slices.Index(ingest.RejectReasons[:], ingest.ReasonWrongType)
}

var (
	lastSuccessDesc = prometheus.NewDesc("gpuscale_adapter_scrape_last_success_timestamp_seconds",
		"Unix time of the last successful scrape of each target pod.", []string{"namespace", "pod"}, nil)
	scrapeErrorsDesc = prometheus.NewDesc("gpuscale_adapter_scrape_errors_total",
		"Failed scrapes by target pod and reason (timeout, connect, http_status, redirect, too_large, limit, parse, cycle_deadline, unknown_dialect, no_gpu_series, duplicate_series, invalid_histogram, too_many_models, ...).",
		[]string{"namespace", "pod", "reason"}, nil)
	rejectedValuesDesc = prometheus.NewDesc("gpuscale_adapter_rejected_values_total",
		"Values dropped from otherwise stored scrapes, by target pod and reason (not_finite, out_of_range, wrong_type, too_many_buckets, model_name); the sums and means they belong to are not served.",
		[]string{"namespace", "pod", "reason"}, nil)
)

// targetCollector reports each target's last success and failures from
// the gatherer's own record of its targets, at collection time. Metric
// vectors would keep a second copy of every target's labels, about 850
// bytes a series: 8 MiB for the last successes of 10,000 inference pods,
// as much again once each has failed once. A vanished target's series go
// with its record.
type targetCollector struct{ g *Gatherer }

func (c targetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- lastSuccessDesc
	ch <- scrapeErrorsDesc
	ch <- rejectedValuesDesc
}

func (c targetCollector) Collect(ch chan<- prometheus.Metric) {
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	for _, t := range c.g.known {
		if ns := t.lastSuccess.Load(); ns != 0 {
			ch <- prometheus.MustNewConstMetric(lastSuccessDesc, prometheus.GaugeValue, float64(ns)/1e9, t.Namespace, t.Pod)
		}
		for i := range t.failures {
			if n := t.failures[i].Load(); n > 0 {
				ch <- prometheus.MustNewConstMetric(scrapeErrorsDesc, prometheus.CounterValue, float64(n), t.Namespace, t.Pod, failReasons[i])
			}
		}
		for i := range t.rejected {
			if n := t.rejected[i].Load(); n > 0 {
				ch <- prometheus.MustNewConstMetric(rejectedValuesDesc, prometheus.CounterValue, float64(n), t.Namespace, t.Pod, ingest.RejectReasons[i])
			}
		}
	}
}
