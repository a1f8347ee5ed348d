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
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/pkg/provider"
)

// DefaultMaxQueryBytes bounds one query's length. Prometheus takes far
// longer queries (they are POSTed), but one regex of thousands of pods is
// better split than sent to a proxy with a small body limit.
const DefaultMaxQueryBytes = 16 << 10

// DefaultMaxResponseBytes bounds one query's answer. A vector naming
// 10,000 pods is about 2 MB; a server that sends far more is broken or
// hostile, and must not take the adapter's memory with it.
const DefaultMaxResponseBytes = 32 << 20

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
	api v1.API
	cfg Config
	// where names the server in errors, without credentials.
	where string
}

var _ provider.Values = (*Source)(nil)

// New returns a Source. It does not contact the server: Prometheus being
// down is an error of each request, never of the adapter's start.
func New(cfg Config) (*Source, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("prometheus url %q: want scheme://host[:port][/path]", cfg.URL)
	}
	if err := cfg.HTTP.Validate(); err != nil {
		return nil, fmt.Errorf("prometheus http client: %w", err)
	}
	hc, err := config.NewClientFromConfig(cfg.HTTP, "gpuscale-adapter")
	if err != nil {
		return nil, fmt.Errorf("prometheus http client: %w", err)
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	hc.Transport = cappedTransport{next: hc.Transport, limit: cfg.MaxResponseBytes}
	c, err := api.NewClient(api.Config{Address: cfg.URL, Client: hc})
	if err != nil {
		return nil, fmt.Errorf("prometheus client: %w", err)
	}
	if cfg.Queries == nil {
		if cfg.Queries, err = NewQueries(QueryFile{}); err != nil {
			return nil, err
		}
	}
	if cfg.MaxQueryBytes <= 0 {
		cfg.MaxQueryBytes = DefaultMaxQueryBytes
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Source{api: v1.NewAPI(c), cfg: cfg, where: u.Redacted()}, nil
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
	if !m.IsTTFT() {
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
	if len(qs) > 1 && (m.IsTTFT() || !m.Sum) {
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
// NaN (a quantile of no requests, 0/0) and infinities are no value.
func (s *Source) each(ctx context.Context, q string, at time.Time, key string, fn func(string, provider.Value)) error {
	vec, err := s.query(ctx, q, at)
	if err != nil {
		return err
	}
	for _, smp := range vec {
		v := float64(smp.Value)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		fn(string(smp.Metric[model.LabelName(key)]), provider.Value{V: v, Time: smp.Timestamp.Time()})
	}
	return nil
}

func (s *Source) query(ctx context.Context, q string, at time.Time) (model.Vector, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	val, _, err := s.api.Query(ctx, q, at, v1.WithTimeout(s.cfg.Timeout), v1.WithLookbackDelta(s.cfg.MaxStaleness))
	if err != nil {
		return nil, fmt.Errorf("query prometheus at %s: %w", s.where, err)
	}
	if val == nil {
		// A 2xx answer with no data ("{}" from a proxy, say) decodes to
		// no value and no error.
		return nil, fmt.Errorf("query prometheus at %s: the answer holds no result: %s", s.where, q)
	}
	vec, ok := val.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("query prometheus at %s: got a %s, want an instant vector: %s", s.where, val.Type(), q)
	}
	return vec, nil
}

// cappedTransport fails the read of any answer body past limit bytes
// (*http.MaxBytesError), so the client's JSON decoding stops there instead
// of holding whatever the server sends.
type cappedTransport struct {
	next  http.RoundTripper
	limit int64
}

func (t cappedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = http.MaxBytesReader(nil, resp.Body, t.limit)
	return resp, nil
}
