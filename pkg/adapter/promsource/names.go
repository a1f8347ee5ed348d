package promsource

import (
	"context"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// names is what the default queries know of the series names the server
// has, as its label values API answers for the names they read
// (Source.probeNames). The defaults read every engine's families and both
// of dcgm-exporter's schemas, the alternatives joined by "or", and a
// server evaluates every side of an "or" even where one matches no series:
// at 10,000 pods, dcgm-exporter 4.10's name beside 4.8's cost Prometheus
// 11 of its 38 ms of evaluation (docs/performance.md). Knowing which names
// the server has, the defaults ask for those alone.
type names struct {
	// has is the names the server has; nil while unknown, when every
	// name is kept.
	has map[string]bool
	// asked, when set, records every name looked up.
	asked map[string]bool
}

// keep returns the items any of whose series (seriesOf) the server has.
// Where it has none of any item's, or where the names are unknown, it
// returns them all: the query then matches nothing either way, and reads
// as the documentation shows it.
func keep[T any](ns names, items []T, seriesOf func(T) []string) []T {
	var out []T
	for _, it := range items {
		series := seriesOf(it)
		for _, s := range series {
			if ns.asked != nil {
				ns.asked[s] = true
			}
		}
		if slices.ContainsFunc(series, func(s string) bool { return ns.has[s] }) {
			out = append(out, it)
		}
	}
	if ns.has == nil || len(out) == 0 {
		return items
	}
	return out
}

// defaultNames is every series name the default queries read, sorted:
// what the names probe asks about. The defaults are compiled in, so the
// names are worked out once.
var defaultNames = sync.OnceValue(func() []string {
	ns := names{asked: map[string]bool{}}
	ns.defaults()
	return slices.Sorted(maps.Keys(ns.asked))
})

// namesMatch is the probe's series selector: every default name.
var namesMatch = sync.OnceValue(func() string {
	re := make([]string, 0, len(defaultNames()))
	for _, n := range defaultNames() {
		re = append(re, regexp.QuoteMeta(n))
	}
	return `{__name__=~` + quote(strings.Join(re, "|")) + `}`
})

// namesProbe is when the server was last asked for its names, and
// whether it is being asked now.
type namesProbe struct {
	mu       sync.Mutex
	at       time.Time
	inFlight bool
	has      map[string]bool // the last answer
	metrics  namesMetrics
}

// namesMetrics are the probe's own series.
type namesMetrics struct {
	probes *prometheus.CounterVec
	has    prometheus.Gauge
}

func newNamesMetrics() namesMetrics {
	return namesMetrics{
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscale_adapter_promql_names_probes_total",
			Help: "Questions to the PromQL source's server about which series names the default queries read it has (--prometheus-names-refresh), by result (ok, error). After an error the queries stay as they were.",
		}, []string{"result"}),
		has: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpuscale_adapter_promql_series_names",
			Help: "How many of the series names the default PromQL queries read the server had at the last answered probe; the defaults read those alone (every name while 0).",
		}),
	}
}

func (m namesMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.probes, m.has}
}

// render executes a template of the queries in use, first asking the
// server in the background for its names when they are due
// (Config.NamesEvery): no request waits for the probe.
func (s *Source) render(shape, metric string, p Params) (string, error) {
	if s.cfg.NamesEvery > 0 {
		s.names.mu.Lock()
		now := s.cfg.Now()
		due := !s.names.inFlight && (s.names.at.IsZero() || now.Sub(s.names.at) >= s.cfg.NamesEvery)
		if due {
			s.names.inFlight, s.names.at = true, now
		}
		s.names.mu.Unlock()
		if due {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
				defer cancel()
				s.probeNames(ctx)
			}()
		}
	}
	return s.queries.Load().Render(shape, metric, p)
}

// probeNames asks the server which of the names the defaults read it had
// over the last namesLookback, and rebuilds the queries for those. A
// failure keeps the queries in use: those of the last answer, or every
// name until one came.
func (s *Source) probeNames(ctx context.Context) {
	defer func() {
		s.names.mu.Lock()
		s.names.inFlight = false
		s.names.mu.Unlock()
	}()
	now := s.cfg.Now()
	got, err := s.api.LabelValues(ctx, "__name__", namesMatch(), now.Add(-namesLookback), now)
	if err != nil {
		s.names.metrics.probes.WithLabelValues("error").Inc()
		s.cfg.Log.Warn("cannot ask prometheus for its series names; the queries stay as they were (--prometheus-names-refresh=0 stops asking)", "err", err)
		return
	}
	s.names.metrics.probes.WithLabelValues("ok").Inc()
	has := make(map[string]bool, len(got))
	for _, n := range got {
		if _, ours := slices.BinarySearch(defaultNames(), n); ours { // anything else the server sends is not ours to read
			has[n] = true
		}
	}
	s.names.metrics.has.Set(float64(len(has)))
	s.names.mu.Lock()
	same := maps.Equal(has, s.names.has)
	s.names.has = has
	s.names.mu.Unlock()
	if same {
		return
	}
	q, err := s.cfg.Queries.forNames(has)
	if err != nil {
		s.cfg.Log.Error("cannot build the default queries for the server's names", "err", err)
		return
	}
	s.queries.Store(q)
	kept := slices.Sorted(maps.Keys(has))
	s.cfg.Log.Info("default queries read the series names prometheus has", "names", kept)
}

// namesLookback is how far back a name counts as the server's: a series
// that stopped for a few scrapes (an exporter restarting) keeps its name
// in the queries, and one gone for longer has no sample a query would
// read within Prometheus's default lookback anyway.
const namesLookback = 5 * time.Minute
