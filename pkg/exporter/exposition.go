package exporter

import (
	"bytes"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// replay is a prometheus.Collector serving prebuilt metrics.
type replay []prometheus.Metric

func (replay) Describe(chan<- *prometheus.Desc) {}
func (r replay) Collect(ch chan<- prometheus.Metric) {
	for _, m := range r {
		ch <- m
	}
}

// encodeExposition renders a collection's metrics once, in the background,
// in the Prometheus text format and in OpenMetrics (without its "# EOF",
// which ends the whole response). A scrape then copies bytes instead of
// converting, sorting and escaping hundreds of series each time.
func encodeExposition(ms []prometheus.Metric) (text, openMetrics []byte, names map[string]bool, err error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(replay(ms)); err != nil {
		return nil, nil, nil, err
	}
	mfs, err := reg.Gather()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("exporter: gather GPU metrics: %w", err)
	}
	var tb, ob bytes.Buffer
	names = make(map[string]bool, len(mfs))
	for _, mf := range mfs {
		names[mf.GetName()] = true
		if _, err := expfmt.MetricFamilyToText(&tb, mf); err != nil {
			return nil, nil, nil, fmt.Errorf("exporter: encode %s: %w", mf.GetName(), err)
		}
		if _, err := expfmt.MetricFamilyToOpenMetrics(&ob, mf); err != nil {
			return nil, nil, nil, fmt.Errorf("exporter: encode %s: %w", mf.GetName(), err)
		}
	}
	return tb.Bytes(), ob.Bytes(), names, nil
}

// HasFamily reports whether Exposition holds the family name: a handler
// that also gathers a registry holding the collector skips it there.
func (s *Snapshot) HasFamily(name string) bool { return s.families[name] }

// Exposition returns the snapshot's GPU series, encoded: in OpenMetrics
// (without "# EOF") when openMetrics is set, else in the text format.
func (s *Snapshot) Exposition(openMetrics bool) []byte {
	if openMetrics {
		return s.openMetrics
	}
	return s.text
}
