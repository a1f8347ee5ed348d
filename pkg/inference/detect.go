package inference

import (
	"errors"
	"fmt"
	"math"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuscale/gpuscale/pkg/histogram"
)

// ErrUnknownDialect is wrapped by Detect's error when a scrape holds no
// metrics of a known inference server.
var ErrUnknownDialect = errors.New("unknown inference server dialect")

// Detect recognises the inference server behind one scrape, as parsed by
// expfmt, and maps its metrics onto Signals. When a signal has several
// series (models, model versions, data-parallel engines) queue depth and
// running requests are summed, KV-cache utilization averaged and TTFT
// histograms merged; Model is then the model names, sorted and joined by
// ",". Series with NaN, infinite or negative values are skipped with a
// warning.
func Detect(families map[string]*dto.MetricFamily) (*Signals, error) {
	m, warnings, err := match(families)
	if err != nil {
		return nil, err
	}
	acc := newAccumulator(m.dialect, warnings)
	eachSeries(m, families, func(string) *accumulator { return acc })
	return acc.signals(), nil
}

// DetectByModel is Detect split by model: one Signals per model name, for
// serving per-model metrics. Series without a model label (all of TGI's) go
// under "". A model whose every series was skipped is present with nil
// signals and the warnings saying why; a scrape of a known dialect without
// any of the mapped series gives an empty map.
func DetectByModel(families map[string]*dto.MetricFamily) (map[string]*Signals, error) {
	m, warnings, err := match(families)
	if err != nil {
		return nil, err
	}
	accs := map[string]*accumulator{}
	eachSeries(m, families, func(model string) *accumulator {
		acc, ok := accs[model]
		if !ok {
			acc = newAccumulator(m.dialect, warnings)
			accs[model] = acc
		}
		return acc
	})
	out := make(map[string]*Signals, len(accs))
	for model, acc := range accs {
		out[model] = acc.signals()
	}
	return out, nil
}

// match picks the first mapping, in priority order, whose prefix some
// family has, warning when other dialects are present too.
func match(families map[string]*dto.MetricFamily) (*mapping, []string, error) {
	var found []*mapping
	for i := range mappings {
		for name := range families {
			if strings.HasPrefix(name, mappings[i].prefix) {
				found = append(found, &mappings[i])
				break
			}
		}
	}
	if len(found) == 0 {
		return nil, nil, fmt.Errorf("%w: no vllm:*, sglang:*, tgi_* or nv_inference_* metrics in the scrape",
			ErrUnknownDialect)
	}
	var warnings []string
	for _, other := range found[1:] {
		warnings = append(warnings, fmt.Sprintf("%s metrics present too; reading the scrape as %s", other.dialect, found[0].dialect))
	}
	return found[0], append(warnings, ttftFamilyWarnings(found[0], families)...), nil
}

// ttftFamilyWarnings explains a TTFT histogram that is there but unusable.
func ttftFamilyWarnings(m *mapping, families map[string]*dto.MetricFamily) []string {
	if m.ttft == "" {
		return nil
	}
	mf, ok := families[m.ttft]
	if !ok {
		if _, ok := families[m.ttft+"_bucket"]; ok {
			return []string{m.ttft + "_bucket exposed without a histogram TYPE line; TTFT ignored"}
		}
		return nil
	}
	if t := mf.GetType(); t != dto.MetricType_HISTOGRAM {
		return []string{fmt.Sprintf("%s is a %s, not a histogram; TTFT ignored", m.ttft, t)}
	}
	return nil
}

// eachSeries feeds every series of m's families to the accumulator that
// route returns for its model.
func eachSeries(m *mapping, families map[string]*dto.MetricFamily, route func(model string) *accumulator) {
	gauges := []struct {
		name string
		add  func(*accumulator, float64) error
	}{
		{m.queue, (*accumulator).addQueue},
		{m.running, (*accumulator).addRunning},
		{firstPresent(families, m.kvCache), func(a *accumulator, v float64) error { return a.addKV(v, m.kvScale) }},
	}
	for _, g := range gauges {
		mf := families[g.name]
		for _, metric := range mf.GetMetric() {
			model := modelOf(metric, m.modelLabels)
			acc := route(model)
			v, err := gaugeValue(mf, metric)
			if err == nil {
				err = g.add(acc, v)
			}
			if err != nil {
				acc.warn(g.name, metric, err)
				continue
			}
			acc.seen(model)
		}
	}
	if mf := families[m.ttft]; m.ttft != "" && mf.GetType() == dto.MetricType_HISTOGRAM {
		for _, metric := range mf.GetMetric() {
			model := modelOf(metric, m.modelLabels)
			acc := route(model)
			h, err := histogram.FromDTO(metric, m.ttftScale)
			if err != nil {
				acc.warn(m.ttft, metric, err)
				continue
			}
			acc.ttft = append(acc.ttft, h)
			acc.seen(model)
		}
	}
}

func firstPresent(families map[string]*dto.MetricFamily, names []string) string {
	for _, n := range names {
		if _, ok := families[n]; ok {
			return n
		}
	}
	return ""
}

func modelOf(m *dto.Metric, labels []string) string {
	for _, name := range labels {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == name {
				return lp.GetValue()
			}
		}
	}
	return ""
}

// gaugeValue reads a gauge, tolerating untyped and counter series (a
// missing TYPE line, or a server exporting a gauge as a counter).
func gaugeValue(mf *dto.MetricFamily, m *dto.Metric) (float64, error) {
	var v float64
	switch {
	case m.GetGauge() != nil:
		v = m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		v = m.GetUntyped().GetValue()
	case m.GetCounter() != nil:
		v = m.GetCounter().GetValue()
	default:
		return 0, fmt.Errorf("is a %s, not a gauge", mf.GetType())
	}
	switch {
	case math.IsNaN(v), math.IsInf(v, 0), v < 0:
		return 0, fmt.Errorf("value %g", v)
	}
	return v, nil
}

// describe renders a series as name{label="value",...} for warnings.
func describe(name string, m *dto.Metric) string {
	var b strings.Builder
	b.WriteString(name)
	for i, lp := range m.GetLabel() {
		if i == 0 {
			b.WriteByte('{')
		} else {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", lp.GetName(), lp.GetValue())
	}
	if len(m.GetLabel()) > 0 {
		b.WriteByte('}')
	}
	return b.String()
}
