package inference

import (
	"fmt"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/dialect"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// accumulator gathers the series of one Signals.
type accumulator struct {
	dialect        Dialect
	queue, running total
	kv             total
	ttft, prefill  histograms
	itl            histograms
	models         map[string]struct{}
	warnings       []string
	rejected       []Rejection
}

// histograms gathers the series of one histogram family. One rejected
// series voids them, as one rejected gauge voids a total.
type histograms struct {
	hs   []*histogram.Histogram
	void bool
}

// merged is the family's histograms added up, nil when there were none or
// one was rejected. Each input passed signal.CheckTTFT; only counts adding
// up past signal.MaxTTFTCount are rejected here.
func (a *accumulator) merged(h *histograms, family string) *histogram.Histogram {
	if len(h.hs) == 0 || h.void {
		return nil
	}
	out, err := histogram.Merge(h.hs...)
	if err == nil {
		err = signal.CheckTTFT(out)
	}
	if err != nil {
		a.rejected = append(a.rejected, Rejection{Series: fmt.Sprintf("%s merged over %d series", family, len(h.hs)), Err: err})
		return nil
	}
	return out
}

// total adds up the series of one signal. One rejected series voids it: a
// sum or a mean that misses a term is not the server's value, so none is
// reported rather than a smaller one.
type total struct {
	sum  float64
	n    int
	void bool
}

// newAccumulator starts with warnings about the whole scrape, copied.
func newAccumulator(d Dialect, warnings []string) *accumulator {
	return &accumulator{dialect: d, models: map[string]struct{}{}, warnings: slices.Clone(warnings)}
}

func (a *accumulator) reject(name string, m *dto.Metric, err error) {
	a.rejected = append(a.rejected, Rejection{Series: Describe(name, m), Err: err})
}

// seen records a series' model; series without one leave no name.
func (a *accumulator) seen(model string) {
	if model != "" {
		a.models[model] = struct{}{}
	}
}

// add takes one series' value, already in the signal's unit, checked
// against the signal's range.
func (t *total) add(sig signal.Signal, v float64) error {
	if err := sig.Check(v); err != nil {
		t.void = true
		return err
	}
	t.sum += v
	t.n++
	return nil
}

// value returns the sum (or, with mean, the mean) of the series, nil when
// there were none or one was rejected. A sum out of the signal's range (many
// series, each in range) is rejected too, as what the family's series add up
// to.
func (a *accumulator) value(t *total, sig signal.Signal, family string, mean bool) *float64 {
	if t.void || t.n == 0 {
		return nil
	}
	v := t.sum
	if mean {
		v /= float64(t.n)
	}
	if err := sig.Check(v); err != nil {
		a.rejected = append(a.rejected, Rejection{Series: fmt.Sprintf("%s over %d series", family, t.n), Err: err})
		return nil
	}
	return &v
}

// signals are the accumulated series, read from r's families.
func (a *accumulator) signals(r *read) *Signals {
	s := &Signals{
		Dialect:            a.dialect,
		QueueDepth:         a.value(&a.queue, signal.QueueDepth, r.family[dialect.Queue], false),
		Running:            a.value(&a.running, signal.RequestsRunning, r.family[dialect.Running], false),
		KVCacheUtilization: a.value(&a.kv, signal.KVCacheUtilization, r.family[dialect.KVCache], true),
		Warnings:           a.warnings,
	}
	s.TTFT = a.merged(&a.ttft, r.family[dialect.TTFT])
	s.Prefill = a.merged(&a.prefill, r.family[dialect.Prefill])
	s.ITL = a.merged(&a.itl, r.family[dialect.ITL])
	s.Rejected = a.rejected
	models := make([]string, 0, len(a.models))
	size := 0
	for m := range a.models {
		models = append(models, m)
		size += len(m) + 1
	}
	if size-1 > MaxServerModelNames {
		// The values stand; the names are not kept.
		s.Rejected = append(s.Rejected, Rejection{Series: fmt.Sprintf("the %d model names", len(models)),
			Err: fmt.Errorf("%w: %d bytes joined, the most is %d", ErrModelName, size-1, MaxServerModelNames)})
		return s
	}
	slices.Sort(models)
	s.Model = strings.Join(models, ",")
	return s
}
