package inference

import (
	"fmt"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuscale/gpuscale/pkg/histogram"
)

// accumulator gathers the series of one Signals.
type accumulator struct {
	dialect        Dialect
	queue, running *float64
	kvSum          float64
	kvN            int
	ttft           []*histogram.Histogram
	models         map[string]struct{}
	warnings       []string
}

// newAccumulator starts with warnings about the whole scrape, copied.
func newAccumulator(d Dialect, warnings []string) *accumulator {
	return &accumulator{dialect: d, models: map[string]struct{}{}, warnings: slices.Clone(warnings)}
}

func (a *accumulator) warn(name string, m *dto.Metric, err error) {
	a.warnings = append(a.warnings, fmt.Sprintf("%s ignored: %v", describe(name, m), err))
}

// seen records a series' model; series without one leave no name.
func (a *accumulator) seen(model string) {
	if model != "" {
		a.models[model] = struct{}{}
	}
}

func (a *accumulator) addQueue(v float64) error {
	a.queue = addTo(a.queue, v)
	return nil
}

func (a *accumulator) addRunning(v float64) error {
	a.running = addTo(a.running, v)
	return nil
}

// addKV takes a 0-1 fraction; a fraction above 1 is no usage level at all,
// so it is skipped like a negative one rather than reported above 100%.
func (a *accumulator) addKV(v, scale float64) error {
	if v > 1 {
		return fmt.Errorf("fraction %g above 1", v)
	}
	a.kvSum += v * scale
	a.kvN++
	return nil
}

func addTo(p *float64, v float64) *float64 {
	if p == nil {
		return &v
	}
	*p += v
	return p
}

func (a *accumulator) signals() *Signals {
	s := &Signals{
		Dialect:    a.dialect,
		QueueDepth: a.queue,
		Running:    a.running,
		Warnings:   a.warnings,
	}
	if a.kvN > 0 {
		kv := a.kvSum / float64(a.kvN)
		s.KVCacheUtilization = &kv
	}
	if len(a.ttft) > 0 {
		h, err := histogram.Merge(a.ttft...)
		if err != nil { // FromDTO validated every input, so this is a bug
			s.Warnings = append(s.Warnings, fmt.Sprintf("TTFT histograms not merged: %v", err))
		}
		s.TTFT = h
	}
	models := make([]string, 0, len(a.models))
	for m := range a.models {
		models = append(models, m)
	}
	slices.Sort(models)
	s.Model = strings.Join(models, ",")
	return s
}
