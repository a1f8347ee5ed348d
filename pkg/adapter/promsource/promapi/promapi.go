// Package promapi is the adapter's client of a Prometheus-compatible query
// API (Prometheus, Thanos, Mimir, VictoriaMetrics): one instant query at a
// time, its answer bounded in size, and of its samples only the finite
// ones. Whatever the server answers is untrusted. The package knows
// nothing of Kubernetes, so that its fuzz target instruments little
// besides it and the Prometheus client.
package promapi

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/config"
)

// DefaultMaxResponseBytes bounds one query's answer. A vector naming
// 10,000 pods is about 2 MB; a server that sends far more is broken or
// hostile, and must not take the adapter's memory with it.
const DefaultMaxResponseBytes = 32 << 20

// Config wires a Client.
type Config struct {
	// URL is the API's base, e.g. http://prometheus:9090 (no /api/v1).
	URL string
	// HTTP is the client's TLS, bearer token and proxy settings.
	HTTP config.HTTPClientConfig
	// Timeout bounds one query, in the client and on the server; 0 means
	// 5s.
	Timeout time.Duration
	// MaxStaleness is sent as the query's lookback_delta (Prometheus,
	// Thanos) and max_lookback (VictoriaMetrics, which ignores
	// lookback_delta), so a series whose newest sample is older gives no
	// value. A backend that ignores both uses its own lookback, 5m in
	// Prometheus.
	MaxStaleness time.Duration
	// MaxResponseBytes bounds one answer; 0 means DefaultMaxResponseBytes.
	MaxResponseBytes int64
}

// Client runs instant queries.
type Client struct {
	client            api.Client
	timeout, lookback time.Duration
	where             string
}

// New returns a Client. It does not contact the server: the server being
// down is an error of each query, never of the adapter's start.
func New(cfg Config) (*Client, error) {
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
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.MaxStaleness > 0 {
		// VictoriaMetrics reads its lookback from max_lookback, in
		// seconds or a duration, and ignores lookback_delta; Prometheus
		// ignores max_lookback. Both read URL and form parameters alike.
		c = withParams{Client: c, params: url.Values{"max_lookback": {strconv.FormatFloat(cfg.MaxStaleness.Seconds(), 'f', -1, 64)}}}
	}
	return &Client{client: c, timeout: cfg.Timeout, lookback: cfg.MaxStaleness, where: u.Redacted()}, nil
}

// withParams adds params to the URL of every request, beside the
// parameters the Prometheus client sends in the form body.
type withParams struct {
	api.Client
	params url.Values
}

func (c withParams) Do(ctx context.Context, req *http.Request) (*http.Response, []byte, error) {
	q := req.URL.Query()
	for k, vs := range c.params {
		q[k] = vs
	}
	req.URL.RawQuery = q.Encode()
	return c.Client.Do(ctx, req)
}

// Where names the server, without credentials.
func (c *Client) Where() string { return c.where }

// Each runs one query at at and calls fn with each finite sample's key
// label, value and time. NaN (a quantile of no requests, 0/0) and
// infinities are no value.
func (c *Client) Each(ctx context.Context, q string, at time.Time, key string, fn func(key string, v float64, t time.Time)) error {
	vec, err := c.Vector(ctx, q, at, key)
	if err != nil {
		return err
	}
	for i := range vec {
		smp := &vec[i]
		if math.IsNaN(smp.Value) || math.IsInf(smp.Value, 0) {
			continue
		}
		k, _ := smp.Label(0)
		fn(k, smp.Value, smp.Timestamp.Time())
	}
	return nil
}

// Vector runs one query at at and returns its instant vector, of each
// sample only the labels named (Sample.Label(i) is labels[i]'s value); any
// other answer is an error.
func (c *Client) Vector(ctx context.Context, q string, at time.Time, labels ...string) ([]Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	code, body, err := c.exchange(ctx, q, at)
	if err != nil {
		return nil, fmt.Errorf("query prometheus at %s: %w", c.where, err)
	}
	vec, err := decode(code, body, labels)
	if err != nil {
		return nil, fmt.Errorf("query prometheus at %s: %w: %s", c.where, err, q)
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

// LabelValues returns the values label takes in the series that match
// selects between start and end (the label values API, which
// VictoriaMetrics, Thanos and Mimir serve as Prometheus does). Values are
// untrusted as any answer is: the caller keeps those it can use.
func (c *Client) LabelValues(ctx context.Context, label, match string, start, end time.Time) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	vals, _, err := v1.NewAPI(c.client).LabelValues(ctx, label, []string{match}, start, end)
	if err != nil {
		return nil, fmt.Errorf("label values of %s at %s: %w", label, c.where, err)
	}
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = string(v)
	}
	return out, nil
}
