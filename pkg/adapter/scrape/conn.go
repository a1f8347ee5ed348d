package scrape

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// The scraper speaks HTTP/1.1 to plain-HTTP targets itself, keeping one
// idle connection per target between cycles. net/http's transport keeps
// an idle connection as two goroutines and two buffers, about 19 KiB, so
// it could keep one per target only up to a few hundred targets; beyond,
// every scrape opened a connection, and at 10,000 targets every 5 s
// connecting and closing were a sixth of the scraping CPU. An idle
// connection here is its socket and nothing else; the buffers are the
// worker's, reused from one scrape to the next, and nothing runs while
// it waits. https targets, and a Config.Client, still go through
// net/http.

// DefaultIdleConnTimeout is how long an idle connection is kept: past it
// the target is likely gone, or its server has closed it.
const DefaultIdleConnTimeout = 90 * time.Second

// maxHeaderBytes bounds a response's status line and headers.
const maxHeaderBytes = 64 << 10

// errHeaderTooLarge fails a response whose headers outgrow maxHeaderBytes.
var errHeaderTooLarge = fmt.Errorf("%w: response headers over %d bytes", ErrLimit, maxHeaderBytes)

// connPool keeps at most one idle connection per target address, and at
// most max in all.
type connPool struct {
	max     int
	timeout time.Duration
	dialer  net.Dialer

	mu    sync.Mutex
	idle  map[string]idleConn
	swept time.Time
}

type idleConn struct {
	c     net.Conn
	since time.Time
}

func newConnPool(max int) *connPool {
	return &connPool{max: max, timeout: DefaultIdleConnTimeout, dialer: net.Dialer{KeepAlive: 30 * time.Second},
		idle: map[string]idleConn{}}
}

// get returns an idle connection to addr, nil if there is none.
func (p *connPool) get(addr string, now time.Time) net.Conn {
	p.mu.Lock()
	ic, ok := p.idle[addr]
	if ok {
		delete(p.idle, addr)
	}
	p.mu.Unlock()
	if !ok {
		return nil
	}
	if now.Sub(ic.since) > p.timeout {
		_ = ic.c.Close()
		return nil
	}
	return ic.c
}

// put keeps c as addr's idle connection, or closes it when addr has one
// already or the pool is full. Now and then it closes the connections
// idle past the timeout, those of targets that are gone.
func (p *connPool) put(addr string, c net.Conn, now time.Time) {
	var closing []net.Conn
	p.mu.Lock()
	if now.Sub(p.swept) > p.timeout/2 {
		p.swept = now
		for a, ic := range p.idle {
			if now.Sub(ic.since) > p.timeout {
				closing = append(closing, ic.c)
				delete(p.idle, a)
			}
		}
	}
	if _, taken := p.idle[addr]; taken || len(p.idle) >= p.max {
		closing = append(closing, c)
	} else {
		p.idle[addr] = idleConn{c: c, since: now}
	}
	p.mu.Unlock()
	for _, c := range closing {
		_ = c.Close()
	}
}

// closeAll closes every idle connection.
func (p *connPool) closeAll() {
	p.mu.Lock()
	idle := p.idle
	p.idle = map[string]idleConn{}
	p.mu.Unlock()
	for _, ic := range idle {
		_ = ic.c.Close()
	}
}

// idleCount returns the idle connections held, for tests.
func (p *connPool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// limitedConn reads from a connection at most left bytes: while a
// response's headers are read, maxHeaderBytes.
type limitedConn struct {
	c    net.Conn
	left int64
	hit  bool
	// read counts what was read, so a failure before the first byte of a
	// response can be retried on a fresh connection.
	read int64
}

func (l *limitedConn) Read(p []byte) (int, error) {
	if l.left <= 0 {
		l.hit = true
		return 0, io.EOF
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.c.Read(p)
	l.left -= int64(n)
	l.read += int64(n)
	return n, err
}

// exchange is one worker's scratch for its plain-HTTP scrapes.
type exchange struct {
	req []byte
	lc  limitedConn
	br  *bufio.Reader
}

func newExchange() *exchange {
	return &exchange{br: bufio.NewReaderSize(nil, readBufSize)}
}

// leanTarget reports whether u is scraped by the scraper's own client.
func (s *Scraper) leanTarget(u *url.URL) bool {
	return s.conns != nil && u.Scheme == "http"
}

// doLean scrapes u over a kept connection, or a new one, and returns the
// connection to the pool when the response was read to its end.
func (s *Scraper) doLean(ctx context.Context, u *url.URL, authorization string, sel *Families, lim *limiter, x *exchange) (map[string]*dto.MetricFamily, error) {
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	x.req = s.request(x.req[:0], u, authorization)
	now := time.Now()
	for attempt := 0; ; attempt++ {
		c, reused := s.conns.get(addr, now), true
		if c == nil {
			var err error
			if c, err = s.conns.dialer.DialContext(ctx, "tcp", addr); err != nil {
				return nil, err
			}
			reused = false
		}
		fams, keep, err := s.exchange(ctx, c, sel, lim, x)
		if keep {
			s.conns.put(addr, c, time.Now())
		} else {
			_ = c.Close()
		}
		if err != nil && pastDeadline(ctx) {
			// The connection's deadline is ctx's, and the read it ended
			// can fail before ctx's own timer has fired: wait for it, so
			// that the error says which deadline it was (the cycle's or
			// this scrape's), as it does on net/http's path.
			<-ctx.Done()
		}
		if err != nil && ctx.Err() != nil {
			// The deadline or the cancellation set on the connection
			// surfaces as a timeout of its read or write.
			return nil, fmt.Errorf("%w: %v", ctx.Err(), err)
		}
		// A kept connection the server closed meanwhile fails before the
		// first byte of a response: once more, on a new one.
		if err != nil && reused && x.lc.read == 0 && attempt == 0 {
			continue
		}
		return fams, err
	}
}

// pastDeadline reports whether ctx has a deadline and it has passed.
func pastDeadline(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// request renders the GET request for u.
func (s *Scraper) request(b []byte, u *url.URL, authorization string) []byte {
	b = append(b, "GET "...)
	b = append(b, u.RequestURI()...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, u.Host...)
	b = append(b, "\r\n"...)
	b = append(b, s.leanHeader...)
	if authorization != "" {
		b = append(b, "Authorization: "...)
		b = append(b, authorization...)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// renderHeader renders h as request header lines.
func renderHeader(h http.Header) []byte {
	var b []byte
	for _, k := range []string{"User-Agent", "Accept", "Accept-Encoding", "X-Prometheus-Scrape-Timeout-Seconds"} {
		b = append(b, k+": "+h.Get(k)+"\r\n"...)
	}
	return b
}

// exchange sends x.req on c and decodes the response. keep reports
// whether c may serve another scrape: the response was read to its end,
// and the server did not ask to close.
func (s *Scraper) exchange(ctx context.Context, c net.Conn, sel *Families, lim *limiter, x *exchange) (fams map[string]*dto.MetricFamily, keep bool, err error) {
	if d, ok := ctx.Deadline(); ok {
		if err := c.SetDeadline(d); err != nil {
			return nil, false, err
		}
	} else {
		_ = c.SetDeadline(time.Time{})
	}
	// A cancelled scrape (the cycle's deadline) stops waiting at once.
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	x.lc = limitedConn{c: c, left: maxHeaderBytes}
	if _, err := c.Write(x.req); err != nil {
		return nil, false, err
	}
	x.br.Reset(&x.lc)
	defer x.br.Reset(nil)
	resp, err := http.ReadResponse(x.br, nil)
	if err != nil {
		if x.lc.hit {
			err = errHeaderTooLarge
		}
		return nil, false, err
	}
	x.lc.left = math.MaxInt64 // the body is bounded by MaxBytes and Limits
	// The body is never closed: closing a response body net/http did
	// not open for its transport reads all that is left of it. An
	// unread body is the connection's end instead.
	body := resp.Body
	// Reusable only if the body ends within a little of where it was
	// left (drained, as net/http does) and nothing more was sent.
	reusable := func() bool {
		n, err := io.Copy(io.Discard, io.LimitReader(body, drainLimit+1))
		return err == nil && n <= drainLimit && !resp.Close && x.br.Buffered() == 0 && stop()
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, reusable(), &StatusError{Code: resp.StatusCode}
	}
	fams, err = decodeBody(body, resp.Header, s.cfg.MaxBytes, sel, lim)
	if err != nil {
		// Whatever is left of an oversized body is not worth reading.
		return nil, !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrLimit) && reusable(), err
	}
	return fams, reusable(), nil
}
