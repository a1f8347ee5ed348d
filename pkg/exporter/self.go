package exporter

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// selfMetrics are the exporter's metrics about itself.
type selfMetrics struct {
	duration    prometheus.Histogram
	errors      prometheus.Counter
	lastSuccess prometheus.Gauge
	devicesSeen prometheus.Gauge
	unhealthy   prometheus.Gauge
	info        prometheus.Gauge
}

func newSelfMetrics(backend gpu.Kind, driver string) *selfMetrics {
	return &selfMetrics{
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gpuscale_exporter_collection_duration_seconds",
			Help:    "Time one background collection of every device took.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpuscale_exporter_collection_errors_total",
			Help: "Collections that failed as a whole (no device could be read).",
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpuscale_exporter_last_collection_success_timestamp_seconds",
			Help: "Unix time of the last collection that succeeded.",
		}),
		devicesSeen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpuscale_exporter_devices",
			Help: "Devices (GPUs and MIG instances) in the last collection.",
		}),
		unhealthy: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpuscale_exporter_devices_unhealthy",
			Help: "Devices whose read failed in the last collection.",
		}),
		info: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpuscale_exporter_info",
			Help: "The exporter's backend (nvml or sim) and driver version; always 1.",
			ConstLabels: prometheus.Labels{
				"backend": backend.String(), "driver_version": driver,
				"simulated": strconv.FormatBool(backend.Simulated()),
			},
		}),
	}
}

// xidDropper is a backend that drops XID events it will not count (the NVML
// backend: codes outside the XID range, or past the distinct codes kept).
type xidDropper interface {
	DroppedXIDEvents() uint64
}

func (m *selfMetrics) register(r prometheus.Registerer, backend gpu.Backend) error {
	m.info.Set(1)
	cs := []prometheus.Collector{m.duration, m.errors, m.lastSuccess, m.devicesSeen, m.unhealthy, m.info}
	if d, ok := backend.(xidDropper); ok {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gpuscale_exporter_xid_events_dropped_total",
			Help: "XID events not counted in gpuscale_gpu_xid_errors_total: a code outside NVIDIA's XID range, or a new code on a device that already counts the most distinct codes kept.",
		}, func() float64 { return float64(d.DroppedXIDEvents()) }))
	}
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *selfMetrics) observe(d time.Duration, err error) {
	m.duration.Observe(d.Seconds())
	if err != nil {
		m.errors.Inc()
	}
}

func (m *selfMetrics) devices(total, unhealthy int, at time.Time) {
	m.devicesSeen.Set(float64(total))
	m.unhealthy.Set(float64(unhealthy))
	m.lastSuccess.Set(float64(at.UnixNano()) / 1e9)
}
