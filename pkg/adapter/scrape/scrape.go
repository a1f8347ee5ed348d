// Package scrape fetches and parses Prometheus expositions (classic text,
// OpenMetrics 1.0, delimited protobuf) from many targets at once, with a
// per-target deadline, a cap on every response body and a bound on
// concurrency, so that one slow, huge or broken target cannot hold up or
// exhaust the process that scrapes the others.
//
// Targets are untrusted. Redirects are not followed and no credentials are
// sent; what a scrape may parse is bounded (Limits) before it is kept, and
// what all scrapes hold at once by an in-flight budget in which every
// worker has a share of its own; a Cycle scrapes failing targets last, on a
// bounded share of the workers, and ends at its deadline.
package scrape

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/utils/clock"
)

// Defaults for the zero fields of Config.
const (
	DefaultTimeout = 3 * time.Second
	// DefaultMaxBytes is 4 MiB: a real vLLM exposition is about 33 KB, a
	// busy GPU exporter's a few hundred KB. Bodies are streamed through
	// the parser, so the cap bounds reading time more than memory, which
	// Limits and the in-flight budget bound.
	DefaultMaxBytes = 4 << 20
	DefaultWorkers  = 64
	// DefaultMaxInflightBytes bounds the estimated memory of everything
	// all scrapes have parsed and not yet handed over (see budget): with
	// the default 64 workers, each has 512 KiB to itself, which a fully
	// parsed vLLM exposition fits several times over, and a 32 MiB pool
	// is shared by larger ones, each borrowing at most half of it.
	DefaultMaxInflightBytes = 64 << 20
	// DefaultMaxIdleConns bounds the connections kept alive between
	// cycles: one per target up to 16,384 targets. An idle plain-HTTP
	// connection is its socket alone (conn.go), about 1 KiB in all; an
	// https one is net/http's, about 19 KiB of buffers and goroutine
	// stacks, so of those at most maxIdleConnsTLS are kept.
	DefaultMaxIdleConns = 16384
	// KernelBytesPerConn is what the kernel charges the process's memory
	// cgroup for one kept connection (its socket, file and epoll entry),
	// outside the Go heap: 52 MiB for about 16,400 on Linux 6.18 (make
	// soak, memory.kmem.usage_in_bytes), rounded up. The adapter leaves
	// it out of its Go memory limit.
	KernelBytesPerConn = 4 << 10
	// maxIdleConnsTLS bounds the idle https connections.
	maxIdleConnsTLS  = 256
	DefaultUserAgent = "gpuscale-adapter"
)

// drainLimit is how much of an unread body is discarded before closing it,
// so the connection can be reused; beyond that, closing is cheaper.
const drainLimit = 4 << 10

// Config configures a Scraper. The zero value is usable.
type Config struct {
	// Timeout is the deadline of one scrape, connection included. Keep it
	// below the scrape interval. Default 3s.
	Timeout time.Duration
	// MaxBytes caps a response body after decompression; larger bodies fail
	// with ErrTooLarge. Default DefaultMaxBytes.
	MaxBytes int64
	// Workers bounds the scrapes in flight during a Cycle. Default 64.
	Workers int
	// Limits bound what one scrape may parse; zero fields take defaults.
	Limits Limits
	// MaxInflightBytes bounds the estimated memory of what all scrapes
	// hold parsed at once; see budget. Default DefaultMaxInflightBytes.
	MaxInflightBytes int64
	// CycleTimeout bounds a Cycle: targets not scraped by then are
	// abandoned and reported with ReasonCycleDeadline. Keep it at most
	// the scrape interval. Zero: no bound but ctx's.
	CycleTimeout time.Duration
	// SuspectWorkers bounds the workers that scrape suspect targets (those
	// whose last scrape failed) at once, so that targets which never
	// answer cannot hold every worker. Default a quarter of Workers, at
	// least one.
	SuspectWorkers int
	// MaxIdleConns bounds the connections the default client keeps alive
	// between scrapes, over all targets (https ones: at most 256).
	// Default DefaultMaxIdleConns.
	MaxIdleConns int
	// Client, when set, is used for its transport; TLSConfig is then
	// ignored. Its redirect policy and cookie jar are not: the Scraper
	// follows no redirect and sends no cookie. The transport must not
	// follow a proxy to reach pod IPs and should not decompress bodies
	// itself (the Scraper asks for gzip and decodes it under the cap).
	Client *http.Client
	// TLSConfig is used for https targets by the default client.
	TLSConfig *tls.Config
	// UserAgent is sent with every request. Default "gpuscale-adapter".
	UserAgent string
	// Clock stamps each Result's Time and Duration. Default the real one.
	Clock clock.PassiveClock
}

func (c Config) withDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	c.Limits = c.Limits.withDefaults()
	if c.MaxInflightBytes <= 0 {
		c.MaxInflightBytes = DefaultMaxInflightBytes
	}
	if c.SuspectWorkers <= 0 {
		c.SuspectWorkers = max(1, c.Workers/4)
	}
	c.SuspectWorkers = min(c.SuspectWorkers, c.Workers)
	if c.UserAgent == "" {
		c.UserAgent = DefaultUserAgent
	}
	if c.MaxIdleConns <= 0 {
		c.MaxIdleConns = DefaultMaxIdleConns
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Client == nil {
		c.Client = &http.Client{Transport: newTransport(c.TLSConfig, min(c.MaxIdleConns, maxIdleConnsTLS))}
	} else {
		c.Client = &http.Client{Transport: c.Client.Transport, Timeout: c.Client.Timeout}
	}
	// A target's answer decides where a redirect goes; following it would
	// let a tenant point the scraper at any host the adapter can reach.
	c.Client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

// newTransport returns a transport for scraping pods directly: no proxy from
// the environment (targets are pod IPs), compression left to the Scraper, and
// a bounded idle pool: each target is its own host, visited once per cycle,
// so a small cluster's scrapes all reuse connections and a large one's
// memory does not grow with its targets. Deadlines come from the request
// context.
func newTransport(tlsConfig *tls.Config, maxIdle int) *http.Transport {
	if tlsConfig != nil {
		tlsConfig = tlsConfig.Clone()
	}
	dialer := &net.Dialer{KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		TLSClientConfig:        tlsConfig,
		DisableCompression:     true,
		MaxIdleConns:           maxIdle,
		MaxIdleConnsPerHost:    1,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
}

// Scraper scrapes exposition endpoints. It is safe for concurrent use.
type Scraper struct {
	cfg    Config
	header http.Header
	budget *budget
	// conns are the kept connections to plain-HTTP targets; nil when a
	// Config.Client does all the scraping.
	conns      *connPool
	leanHeader []byte
}

// exchanges are the buffers of scrapes made outside a Cycle.
var exchanges = sync.Pool{New: func() any { return newExchange() }}

// New returns a Scraper for cfg, with defaults filled in.
func New(cfg Config) *Scraper {
	own := cfg.Client == nil
	cfg = cfg.withDefaults()
	h := make(http.Header, 5)
	h.Set("Accept", acceptHeader)
	h.Set("Accept-Encoding", "gzip")
	h.Set("User-Agent", cfg.UserAgent)
	// Prometheus sends this too; some exporters size their work by it.
	h.Set("X-Prometheus-Scrape-Timeout-Seconds", strconv.FormatFloat(cfg.Timeout.Seconds(), 'f', -1, 64))
	s := &Scraper{cfg: cfg, header: h, budget: newBudget(cfg.MaxInflightBytes, cfg.Workers), leanHeader: renderHeader(h)}
	if own {
		s.conns = newConnPool(cfg.MaxIdleConns)
	}
	return s
}

// CloseIdleConnections closes the connections kept between scrapes.
func (s *Scraper) CloseIdleConnections() {
	s.cfg.Client.CloseIdleConnections()
	if s.conns != nil {
		s.conns.closeAll()
	}
}

// Scrape fetches rawURL and parses the exposition according to the response's
// Content-Type, within Config.Timeout. An empty body yields no families and
// no error. Errors name the URL; Reason classifies them.
func (s *Scraper) Scrape(ctx context.Context, rawURL string) (map[string]*dto.MetricFamily, error) {
	return s.ScrapeFamilies(ctx, rawURL, nil)
}

// ScrapeFamilies is Scrape limited to the families sel selects (all of them
// when sel is nil). Outside a Cycle, a scrape has no guaranteed share of
// the in-flight budget: it borrows all it parses from the shared pool.
func (s *Scraper) ScrapeFamilies(ctx context.Context, rawURL string, sel *Families) (map[string]*dto.MetricFamily, error) {
	l := s.budget.lease(0)
	defer l.release()
	x := exchanges.Get().(*exchange)
	defer exchanges.Put(x)
	return s.scrape(ctx, rawURL, sel, l, nil, x, "", 0)
}

// scrape is ScrapeFamilies charging what it parses to l, parsing the text
// format into a (fresh memory when nil) with x's buffers, sending
// authorization if set, within timeout when it is positive and shorter
// than Config.Timeout; the caller releases l, and resets a, once the
// families are no longer needed.
func (s *Scraper) scrape(ctx context.Context, rawURL string, sel *Families, l *lease, a *arena, x *exchange, authorization string, timeout time.Duration) (map[string]*dto.MetricFamily, error) {
	if timeout <= 0 || timeout > s.cfg.Timeout {
		timeout = s.cfg.Timeout
	}
	attempt, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, &scrapeError{url: rawURL, reason: ReasonOther, err: err}
	}
	if err := ctx.Err(); err != nil {
		// Cycle lands here for every target left when ctx ends.
		return nil, newError(ctx, attempt, u.Redacted(), err)
	}
	if u.User != nil {
		// Go would send them as basic auth, to whatever the URL names.
		return nil, &scrapeError{url: u.Redacted(), reason: ReasonOther, err: errCredentials}
	}
	lim := newLimiter(s.cfg.Limits, l)
	lim.arena = a
	defer lim.done()
	var fams map[string]*dto.MetricFamily
	if s.leanTarget(u) {
		fams, err = s.doLean(attempt, u, authorization, sel, lim, x)
	} else {
		fams, err = s.doRequest(attempt, rawURL, authorization, sel, lim)
	}
	if err != nil {
		return nil, newError(ctx, attempt, u.Redacted(), err)
	}
	return fams, nil
}

// doRequest scrapes rawURL through the configured http.Client.
func (s *Scraper) doRequest(ctx context.Context, rawURL, authorization string, sel *Families, lim *limiter) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header = s.header.Clone()
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	return s.do(req, sel, lim)
}

func (s *Scraper) do(req *http.Request, sel *Families, lim *limiter) (map[string]*dto.MetricFamily, error) {
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		// Drop *url.Error: the URL is added once, by scrapeError.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, err
	}
	drain := true
	defer func() { closeBody(resp.Body, drain) }()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, &StatusError{Code: resp.StatusCode}
	}
	fams, err := decodeBody(resp.Body, resp.Header, s.cfg.MaxBytes, sel, lim)
	if err != nil {
		// Whatever is left of an oversized body is not worth reading.
		drain = !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrLimit)
		return nil, err
	}
	return fams, nil
}

// closeBody closes body, first discarding a little of what is left when
// drain is set, so that a small unread tail does not cost the connection.
func closeBody(body io.ReadCloser, drain bool) {
	if drain {
		_, _ = io.Copy(io.Discard, io.LimitReader(body, drainLimit))
	}
	_ = body.Close()
}
