// Package promsource answers the adapter's metric values from a
// Prometheus-compatible HTTP API (Prometheus, Thanos, Mimir,
// VictoriaMetrics) instead of the embedded scraper: for clusters where one
// adapter cannot scrape every pod. Each value is a documented, overridable
// PromQL template (see DefaultQueries) computing the embedded source's
// number, and one metrics API request is one query: the pods asked about
// go into one regex, split only when the query would outgrow
// Config.MaxQueryBytes.
package promsource

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/pkg/promsource/promapi"
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
	// Now is the query time; nil means time.Now.
	Now func() time.Time
}

// Source implements provider.Values over the Prometheus HTTP API.
type Source struct {
	api *promapi.Client
	cfg Config
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
	return &Source{api: c, cfg: cfg}, nil
}

// errSplit is returned where a merged value cannot be computed from a
// split query.
var errSplit = errors.New("too many pods for one query, and this value cannot be merged from several")

// Pods implements provider.Values: one query for all the pods (see
// batches), matched to them by the result's pod label.
func (s *Source) Pods(ctx context.Context, pods *provider.PodSet, m provider.Metric, sel labels.Selector) ([]provider.Value, error) {
	p, err := s.params(pods.Namespace, m, sel)
	if err != nil {
		return nil, err
	}
	names := pods.Names()
	qs, err := s.batches(ShapePods, m.Name, p, names, setPods)
	if err != nil {
		return nil, err
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
	out := make([]provider.Value, len(names))
	now := s.cfg.Now()
	for _, q := range qs {
		// Only the asked pods: a template that answers for more (an
		// overridden one without the regex) must not add strangers.
		err := s.each(ctx, q, now, "pod", func(name string, v provider.Value) {
			if i, ok := at[name]; ok {
				out[i] = v
			}
		})
		if err != nil {
			return nil, err
		}
	}
	if dup {
		for i, n := range names {
			out[i] = out[at[n]]
		}
	}
	return out, nil
}

// byKey runs the queries and keeps the values of the asked names only: a
// template that answers for more (an overridden one without the regex)
// must not add strangers to a workload's sum.
func (s *Source) byKey(ctx context.Context, qs []string, key string, names []string) (map[string]provider.Value, error) {
	asked := make(map[string]bool, len(names))
	for _, n := range names {
		asked[n] = true
	}
	out := make(map[string]provider.Value, len(names))
	at := s.cfg.Now()
	for _, q := range qs {
		err := s.each(ctx, q, at, key, func(name string, v provider.Value) {
			if asked[name] {
				out[name] = v
			}
		})
		if err != nil {
			return nil, err
		}
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
	var (
		v  provider.Value
		ok bool
	)
	err = s.each(ctx, qs[0], s.cfg.Now(), "", func(_ string, got provider.Value) { v, ok = got, true })
	return v, ok, err
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
	return s.byKey(ctx, qs, "Hostname", nodes)
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
	out := map[string]provider.Value{}
	at := s.cfg.Now()
	for _, q := range qs {
		err := s.each(ctx, q, at, provider.ModelLabel, func(model string, v provider.Value) {
			if model == "" {
				return // the embedded source ignores servers that name no model
			}
			v.V += out[model].V
			out[model] = v
		})
		if err != nil {
			return nil, err
		}
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

// each runs one query and calls fn with each finite sample's key label.
func (s *Source) each(ctx context.Context, q string, at time.Time, key string, fn func(string, provider.Value)) error {
	return s.api.Each(ctx, q, at, key, func(k string, v float64, t time.Time) {
		fn(k, provider.Value{V: v, Time: t})
	})
}
