package inference

import (
	"errors"
	"fmt"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/dialect"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// ErrUnknownDialect is wrapped by Detect's error when a scrape holds no
// metrics of a known inference server.
var ErrUnknownDialect = errors.New("unknown inference server dialect")

// ErrNotGauge is wrapped by the error of a Rejection whose series is of
// another type (a histogram where a gauge was expected).
var ErrNotGauge = errors.New("not a gauge")

// Detect recognises the inference server behind one scrape, as parsed by
// expfmt, and maps its metrics onto Signals. When a signal has several
// series (models, model versions, data-parallel engines) queue depth and
// running requests are summed, KV-cache utilization averaged and TTFT
// histograms merged; Model is then the model names, sorted and joined by
// ",". A series whose value is not finite or outside its signal's physical
// range (signal.Signal.Check), or whose histogram fails signal.CheckTTFT, is
// listed in Rejected, and the signal it belongs to is nil: a sum or mean
// without it would be a wrong number. So is a sum out of that range.
func Detect(families map[string]*dto.MetricFamily) (*Signals, error) {
	m, warnings, err := match(families)
	if err != nil {
		return nil, err
	}
	acc := newAccumulator(m.Name, warnings)
	r := present(m, families)
	eachSeries(r, families, func(string) *accumulator { return acc })
	return acc.signals(r), nil
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
	r := present(m, families)
	eachSeries(r, families, func(model string) *accumulator {
		acc, ok := accs[model]
		if !ok {
			acc = newAccumulator(m.Name, warnings)
			accs[model] = acc
		}
		return acc
	})
	out := make(map[string]*Signals, len(accs))
	for model, acc := range accs {
		out[model] = acc.signals(r)
	}
	return out, nil
}

// match picks the first mapping, in priority order, whose prefix some
// family has, warning when other dialects are present too.
func match(families map[string]*dto.MetricFamily) (*mapping, []string, error) {
	var found []*mapping
	for i := range mappings {
		for name := range families {
			if strings.HasPrefix(name, mappings[i].Prefix) {
				found = append(found, &mappings[i])
				break
			}
		}
	}
	if len(found) == 0 {
		return nil, nil, fmt.Errorf("%w: no %s metrics in the scrape (nor a router's: %s*)",
			ErrUnknownDialect, knownPrefixes, strings.Join(routerPrefixes(), "*, "))
	}
	var warnings []string
	for _, other := range found[1:] {
		warnings = append(warnings, fmt.Sprintf("%s metrics present too; reading the scrape as %s", other.Name, found[0].Name))
	}
	return found[0], append(warnings, ttftFamilyWarnings(found[0], families)...), nil
}

// ttftFamilyWarnings explains a TTFT histogram that is there but unusable.
func ttftFamilyWarnings(m *mapping, families map[string]*dto.MetricFamily) []string {
	ttft := m.Families(dialect.TTFT)
	name := firstPresent(families, ttft)
	if name == "" {
		for _, n := range ttft {
			if _, ok := families[n+"_bucket"]; ok {
				return []string{n + "_bucket exposed without a histogram TYPE line; TTFT ignored"}
			}
		}
		return nil
	}
	if t := families[name].GetType(); t != dto.MetricType_HISTOGRAM {
		return []string{fmt.Sprintf("%s is a %s, not a histogram; TTFT ignored", name, t)}
	}
	return nil
}

// knownPrefixes are the engines' prefixes, for the error naming them.
var knownPrefixes = dialect.Enumerate(func(e *dialect.Engine) string { return e.Prefix + "*" })

// present is, per signal, the first of m's families that the scrape has,
// "" when none: the one family a signal is read from.
func present(m *mapping, families map[string]*dto.MetricFamily) *read {
	r := &read{m: m}
	for _, s := range dialect.Signals() {
		r.family[s] = firstPresent(families, m.Families(s))
	}
	return r
}

// read is what Detect reads of one scrape of engine m: per signal the
// family present and the factor to the signal's unit.
type read struct {
	m      *mapping
	family [dialect.NumSignals]string
}

func (r *read) scale(s dialect.Signal) float64 { return r.m.Reads[s].Scale }

// eachSeries feeds every series of r's families to the accumulator that
// route returns for its model.
func eachSeries(r *read, families map[string]*dto.MetricFamily, route func(model string) *accumulator) {
	m := r.m
	gauges := []struct {
		name  string
		sig   signal.Signal
		scale float64
		total func(*accumulator) *total
	}{
		{r.family[dialect.Queue], signal.QueueDepth, r.scale(dialect.Queue), func(a *accumulator) *total { return &a.queue }},
		{r.family[dialect.Running], signal.RequestsRunning, r.scale(dialect.Running), func(a *accumulator) *total { return &a.running }},
		{r.family[dialect.KVCache], signal.KVCacheUtilization, r.scale(dialect.KVCache), func(a *accumulator) *total { return &a.kv }},
	}
	for _, g := range gauges {
		mf := families[g.name]
		for _, metric := range mf.GetMetric() {
			model := modelOf(metric, m.ModelLabels)
			acc := route(model)
			v, err := gaugeValue(mf, metric)
			if err == nil {
				err = checkModelName(model)
			}
			if err != nil {
				g.total(acc).void = true
			} else {
				err = g.total(acc).add(g.sig, v*g.scale)
			}
			if err != nil {
				acc.reject(g.name, metric, err)
				continue
			}
			acc.seen(model)
		}
	}
	for _, h := range []struct {
		sig  dialect.Signal
		into func(*accumulator) *histograms
	}{
		{dialect.TTFT, func(a *accumulator) *histograms { return &a.ttft }},
		{dialect.Prefill, func(a *accumulator) *histograms { return &a.prefill }},
		{dialect.ITL, func(a *accumulator) *histograms { return &a.itl }},
	} {
		eachHistogram(families, r.family[h.sig], r.scale(h.sig), m.ModelLabels, route, h.into)
	}
}

// eachHistogram feeds the series of one histogram family, scaled to
// seconds, to their models' accumulators.
func eachHistogram(families map[string]*dto.MetricFamily, family string, scale float64, modelLabels []string,
	route func(model string) *accumulator, into func(*accumulator) *histograms) {
	mf := families[family]
	if family == "" || mf.GetType() != dto.MetricType_HISTOGRAM {
		return
	}
	for _, metric := range mf.GetMetric() {
		model := modelOf(metric, modelLabels)
		acc := route(model)
		err := checkModelName(model)
		var h *histogram.Histogram
		if err == nil {
			h, err = histogram.FromDTO(metric, scale)
		}
		if err == nil {
			err = signal.CheckTTFT(h)
		}
		if err != nil {
			into(acc).void = true
			acc.reject(family, metric, err)
			continue
		}
		into(acc).hs = append(into(acc).hs, h)
		acc.seen(model)
	}
}

// checkModelName refuses a model name past MaxModelName.
func checkModelName(model string) error {
	if len(model) > MaxModelName {
		return fmt.Errorf("%w: %d bytes, the most is %d", ErrModelName, len(model), MaxModelName)
	}
	return nil
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
// missing TYPE line, or a server exporting a gauge as a counter). The
// value's range is the signal's to check.
func gaugeValue(mf *dto.MetricFamily, m *dto.Metric) (float64, error) {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue(), nil
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue(), nil
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue(), nil
	}
	return 0, fmt.Errorf("%w: a %s", ErrNotGauge, mf.GetType())
}

// Describe renders a series as name{label="value",...}, for warnings and
// errors that name it.
func Describe(name string, m *dto.Metric) string {
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
