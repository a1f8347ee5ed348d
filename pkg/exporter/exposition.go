package exporter

import (
	"bytes"
	"fmt"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// encodeExposition renders a collection's metrics once, in the background,
// in the Prometheus text format and in OpenMetrics (without its "# EOF",
// which ends the whole response). A scrape then copies bytes instead of
// converting, sorting and escaping hundreds of series each time.
func encodeExposition(mfs []*dto.MetricFamily) (text, openMetrics []byte, names map[string]bool, err error) {
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
