// Package promsource answers the adapter's metric values from a
// Prometheus-compatible HTTP API (Prometheus, Thanos, Mimir,
// VictoriaMetrics) instead of the embedded scraper: for clusters where one
// adapter cannot scrape every pod. Each value is a documented, overridable
// PromQL template (see DefaultQueries) computing the embedded source's
// number. A per-pod request asks either about its pods by name, in one
// regex split only when the query would outgrow Config.MaxQueryBytes (the
// splits run in parallel, Config.Parallel at a time), or about the whole
// namespace, keeping its pods here: whichever the costs measured so far
// predict to be cheaper (plan.go). Identical queries share one answer,
// reused for Config.ReuseFor (reads.go).
package promsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/pkg/adapter/promsource/promapi"
	"github.com/gpuscale/gpuscale/pkg/provider"
)

// DefaultMaxQueryBytes bounds one query's length. Prometheus takes far
// longer queries (they are POSTed), but one regex of thousands of pods is
// better split than sent to a proxy with a small body limit.
const DefaultMaxQueryBytes = 16 << 10

// DefaultMaxResponseBytes bounds one query's answer (promapi).
const DefaultMaxResponseBytes = promapi.DefaultMaxResponseBytes

// Config wires a Source.
type Config struct {
	// URL is the API's base, e.g. http://prometheus:9090 (no /api/v1).
	URL string
	// HTTP is the client's TLS, bearer token and proxy settings.
	HTTP config.HTTPClientConfig
	// Timeout bounds one query, in the client and on the server.
	Timeout time.Duration
	// MaxStaleness is sent as the query's lookback_delta, so a series
	// whose newest sample is older gives no value (the embedded source's
	// --max-staleness rule). A backend that ignores the parameter uses its
	// own lookback, 5m in Prometheus.
	MaxStaleness time.Duration
	// TTFTWindow is the range of TTFT's rate().
	TTFTWindow time.Duration
	// Queries are the templates; nil means DefaultQueries.
	Queries *Queries
	// MaxQueryBytes bounds one query; 0 means DefaultMaxQueryBytes.
	MaxQueryBytes int
	// MaxResponseBytes bounds one answer; 0 means DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// Parallel bounds the queries of one request run at once; 0 means
	// DefaultParallel.
	Parallel int
	// ReuseFor is how long an answer is reused by identical queries:
	// a fraction of the server's scrape interval (DefaultReuseFraction),
	// as the data change once per scrape. 0: answers are only shared by
	// queries asked while they are in flight.
	ReuseFor time.Duration
	// PodsIn returns how many pods a namespace has, for the choice
	// between asking about pods by name and about the whole namespace;
	// nil: the planner learns it from its first wide read only.
	PodsIn func(namespace string) int
	// Now is the query time; nil means time.Now.
	Now func() time.Time
	// NamesEvery is how often the server is asked which of the series
	// names the default queries read it has (names.go), so that the
	// defaults ask for those alone; 0: never, every default reads every
	// name. Templates of the Queries file are never changed.
	NamesEvery time.Duration
	// Log hears the names probe's failures and changes; nil: discarded.
	Log *slog.Logger
	// Registerer takes the source's own series (names.go); nil: none
	// registered.
	Registerer prometheus.Registerer
}

// DefaultParallel bounds the split queries of one request in flight: a
// request of 10,000 pods by name is about 8 of them, and a server answers
// a few at once about as fast as one after another on a busy core, so
// more would only queue there.
const DefaultParallel = 4

// DefaultReuseFraction is the share of the server's scrape interval for
// which an answer is reused: a value is then at most a quarter of an
// interval older than a fresh query's.
const DefaultReuseFraction = 4

// Source implements provider.Values over the Prometheus HTTP API.
type Source struct {
	api   *promapi.Client
	cfg   Config
	reads *reads
	plan  *planner
	// queries are cfg.Queries with the defaults asking for the names
	// the server has, once known (probeNames).
	queries atomic.Pointer[Queries]
	names   namesProbe
}

var _ provider.Values = (*Source)(nil)

// New returns a Source. It does not contact the server: Prometheus being
// down is an error of each request, never of the adapter's start.
func New(cfg Config) (*Source, error) {
	c, err := promapi.New(promapi.Config{URL: cfg.URL, HTTP: cfg.HTTP, Timeout: cfg.Timeout,
		MaxStaleness: cfg.MaxStaleness, MaxResponseBytes: cfg.MaxResponseBytes})
	if err != nil {
		return nil, err
	}
	if cfg.Queries == nil {
		if cfg.Queries, err = NewQueries(QueryFile{}); err != nil {
			return nil, err
		}
	}
	if cfg.MaxQueryBytes <= 0 {
		cfg.MaxQueryBytes = DefaultMaxQueryBytes
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = DefaultParallel
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Source{api: c, cfg: cfg, reads: newReads(cfg.ReuseFor, cfg.Now),
		plan: newPlanner(cfg.Now, cfg.ReuseFor, cfg.PodsIn)}
	s.queries.Store(cfg.Queries)
	s.names.metrics = newNamesMetrics()
	if cfg.Registerer != nil {
		for _, c := range s.names.metrics.collectors() {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register %T: %w", c, err)
			}
		}
	}
	return s, nil
}

// errSplit is returned where a merged value cannot be computed from a
// split query.
var errSplit = errors.New("too many pods for one query, and this value cannot be merged from several")

// Pods implements provider.Values: the pods asked by name or the whole
// namespace (plan.go), matched to the pods by the result's pod label.
func (s *Source) Pods(ctx context.Context, pods *provider.PodSet, m provider.Metric, sel labels.Selector) ([]provider.Value, error) {
	p, err := s.params(pods.Namespace, m, sel)
	if err != nil {
		return nil, err
	}
	names := pods.Names()
	out := make([]provider.Value, len(names))
	if len(names) == 0 {
		return out, nil
	}
	wideQ, err := s.wideQuery(ShapePods, m.Name, p)
	if err != nil {
		return nil, err
	}
	var vecs [][]promapi.Sample
	if wideQ != "" && s.plan.wideRead(pods.Namespace, m.Name, wideQ, len(names)) {
		vec, took, ran, err := s.reads.get(ctx, wideQ, s.query(wideQ))
		if err != nil {
			return nil, err
		}
		if ran {
			s.plan.wideDone(m.Name, wideQ, len(vec), took)
		}
		vecs = [][]promapi.Sample{vec}
	} else {
		qs, err := s.batches(ShapePods, m.Name, p, names, setPods)
		if err != nil {
			return nil, err
		}
		var took time.Duration
		if vecs, took, err = s.fetch(ctx, qs); err != nil {
			return nil, err
		}
		if took > 0 {
			s.plan.byName(m.Name, len(names), took)
		}
	}
	at := make(map[string]int, len(names))
	dup := false
	for i, n := range names {
		if _, seen := at[n]; seen {
			dup = true
			continue
		}
		at[n] = i
	}
	// Only the asked pods: the namespace's others, or those a template
	// answers for beyond its regex or namespace (an overridden one),
	// which may name a namespace only if it is the asked one.
	ns := pods.Namespace
	for _, vec := range vecs {
		for j := range vec {
			smp := &vec[j]
			pod, _ := smp.Label(labelPod)
			if i, ok := at[pod]; ok {
				if got, named := smp.Label(labelNamespace); !named || got == ns {
					if v, ok := value(smp); ok {
						out[i] = v
					}
				}
			}
		}
	}
	if dup {
		for i, n := range names {
			out[i] = out[at[n]]
		}
	}
	return out, nil
}

// wideQuery renders the query of a shape for every pod of the namespace,
// "" when the template does not name pods (it is then wide already).
func (s *Source) wideQuery(shape, metric string, p Params) (string, error) {
	p.PodRegex = ""
	named, err := s.render(shape, metric, p)
	if err != nil {
		return "", err
	}
	p.PodRegex = ".*"
	wide, err := s.render(shape, metric, p)
	if err != nil || wide == named {
		return "", err
	}
	return wide, nil
}

// The labels kept of every answer's samples, whichever the query: reads
// shares an answer by the query's text alone.
const (
	labelPod = iota
	labelNamespace
	labelHostname
	labelModel
	noLabel = -1
)

var resultLabels = []string{labelPod: "pod", labelNamespace: "namespace", labelHostname: "Hostname", labelModel: provider.ModelLabel}

// query returns the fetch of q for reads.get.
func (s *Source) query(q string) func(context.Context, time.Time) ([]promapi.Sample, error) {
	return func(ctx context.Context, at time.Time) ([]promapi.Sample, error) {
		return s.api.Vector(ctx, q, at, resultLabels...)
	}
}

// fetch runs qs, at most Config.Parallel at a time, through the shared
// reads. took is the server's time for the queries this call ran, 0
// unless it ran them all (its cost per name is then known).
func (s *Source) fetch(ctx context.Context, qs []string) ([][]promapi.Sample, time.Duration, error) {
	out := make([][]promapi.Sample, len(qs))
	if len(qs) == 1 {
		vec, took, ran, err := s.reads.get(ctx, qs[0], s.query(qs[0]))
		if !ran {
			took = 0
		}
		out[0] = vec
		return out, took, err
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total time.Duration
		all   = true
		errs  = make([]error, len(qs))
		slots = make(chan struct{}, s.cfg.Parallel)
	)
	for i, q := range qs {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			errs[i] = ctx.Err()
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			vec, took, ran, err := s.reads.get(ctx, q, s.query(q))
			out[i], errs[i] = vec, err
			mu.Lock()
			total += took
			all = all && ran
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, 0, err
	}
	if !all {
		total = 0
	}
	return out, total, nil
}

// each calls fn with each finite sample of vec by its key label, one of
// resultLabels ("" for noLabel).
func each(vec []promapi.Sample, key int, fn func(string, provider.Value)) {
	for i := range vec {
		if v, ok := value(&vec[i]); ok {
			k, _ := vec[i].Label(key)
			fn(k, v)
		}
	}
}

// value is a sample's value, false when it is not finite: NaN (a quantile
// of no requests, 0/0) and infinities are no value.
func value(smp *promapi.Sample) (provider.Value, bool) {
	v := smp.Value
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return provider.Value{}, false
	}
	return provider.Value{V: v, Time: smp.Timestamp.Time()}, true
}

// byKey runs the queries and keeps the values, by their key label (one of
// resultLabels), of the asked names only: a template that answers for
// more (an overridden one without the regex) must not add strangers to a
// workload's sum.
func (s *Source) byKey(ctx context.Context, qs []string, key int, names []string) (map[string]provider.Value, error) {
	asked := make(map[string]bool, len(names))
	for _, n := range names {
		asked[n] = true
	}
	out := make(map[string]provider.Value, len(names))
	vecs, _, err := s.fetch(ctx, qs)
	if err != nil {
		return nil, err
	}
	for _, vec := range vecs {
		each(vec, key, func(name string, v provider.Value) {
			if asked[name] {
				out[name] = v
			}
		})
	}
	return out, nil
}

// Workload implements provider.Values. Scalars are the per-pod values
// summed or averaged here, exactly as the embedded source does (a mean of
// the pods' means, not of all their GPUs); TTFT is one query over the
// pods' merged bucket rates.
func (s *Source) Workload(ctx context.Context, namespace string, pods []*corev1.Pod, m provider.Metric, sel labels.Selector) (provider.Value, bool, error) {
	if !m.IsQuantile() {
		vals, err := s.Pods(ctx, provider.NewPodSet(namespace, pods), m, sel)
		if err != nil {
			return provider.Value{}, false, err
		}
		var (
			v provider.Value
			n int
		)
		for _, pv := range vals {
			if pv.Valid() {
				v.V += pv.V
				v.Time = pv.Time
				n++
			}
		}
		if n == 0 {
			return provider.Value{}, false, nil
		}
		if !m.Sum {
			v.V /= float64(n)
		}
		return v, true, nil
	}
	p, err := s.params(namespace, m, sel)
	if err != nil {
		return provider.Value{}, false, err
	}
	qs, err := s.batches(ShapeWorkload, m.Name, p, podNames(pods), setPods)
	if err != nil {
		return provider.Value{}, false, err
	}
	if len(qs) == 0 {
		return provider.Value{}, false, nil
	}
	if len(qs) > 1 {
		return provider.Value{}, false, fmt.Errorf("%s of %d pods: %w", m.Name, len(pods), errSplit)
	}
	vecs, _, err := s.fetch(ctx, qs)
	if err != nil {
		return provider.Value{}, false, err
	}
	var (
		v  provider.Value
		ok bool
	)
	each(vecs[0], noLabel, func(_ string, got provider.Value) { v, ok = got, true })
	return v, ok, nil
}

// Nodes implements provider.Values, keyed by the exporter's Hostname label.
func (s *Source) Nodes(ctx context.Context, nodes []string, m provider.Metric) (map[string]provider.Value, error) {
	p, err := s.params("", m, nil)
	if err != nil {
		return nil, err
	}
	qs, err := s.batches(ShapeNodes, m.Name, p, nodes, func(p *Params, re string) { p.NodeRegex = re })
	if err != nil {
		return nil, err
	}
	return s.byKey(ctx, qs, labelHostname, nodes)
}

// Models implements provider.Values, keyed by the result's model_name
// label. Sums add up over split queries; quantiles cannot.
func (s *Source) Models(ctx context.Context, namespace string, pods []*corev1.Pod, m provider.Metric, sel labels.Selector) (map[string]provider.Value, error) {
	p, err := s.params(namespace, m, sel)
	if err != nil {
		return nil, err
	}
	qs, err := s.batches(ShapeModels, m.Name, p, podNames(pods), setPods)
	if err != nil {
		return nil, err
	}
	if len(qs) > 1 && (m.IsQuantile() || !m.Sum) {
		return nil, fmt.Errorf("%s of %d pods: %w", m.Name, len(pods), errSplit)
	}
	vecs, _, err := s.fetch(ctx, qs)
	if err != nil {
		return nil, err
	}
	out := map[string]provider.Value{}
	for _, vec := range vecs {
		each(vec, labelModel, func(model string, v provider.Value) {
			if model == "" {
				return // the embedded source ignores servers that name no model
			}
			v.V += out[model].V
			out[model] = v
		})
	}
	return out, nil
}

func (s *Source) params(namespace string, m provider.Metric, sel labels.Selector) (Params, error) {
	model, err := matchers(sel)
	if err != nil {
		return Params{}, err
	}
	return Params{
		Namespace: escape(namespace),
		Window:    promDuration(s.cfg.TTFTWindow),
		Quantile:  strconv.FormatFloat(m.Quantile, 'g', -1, 64),
		model:     model,
	}, nil
}

func promDuration(d time.Duration) string { return model.Duration(d).String() }
