package scrape

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// countingServer serves body and counts the connections opened to it.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

// loopbackTargets are n targets on distinct loopback addresses of one
// port: each its own host, as pods are.
func loopbackTargets(t *testing.T, n int, h http.HandlerFunc) ([]Target, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	ts := make([]Target, n)
	for i := range ts {
		addr := fmt.Sprintf("127.0.%d.%d:%d", 10+i/250, 1+i%250, port)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h, ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				conns.Add(1)
			}
		}}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
		ts[i] = Target{Key: addr, URL: "http://" + addr + "/metrics"}
	}
	return ts, &conns
}

// TestCycleKeepsAConnectionPerTarget: cycle after cycle over more
// targets than net/http's pool kept (256), every target is scraped over
// the connection of the first cycle.
func TestCycleKeepsAConnectionPerTarget(t *testing.T) {
	const n = 300
	ts, conns := loopbackTargets(t, n, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", ctText)
		_, _ = w.Write([]byte("up 1\n"))
	})
	s := New(Config{})
	t.Cleanup(s.CloseIdleConnections)
	var failed atomic.Int64
	for range 3 {
		s.Cycle(t.Context(), ts, func(r Result) {
			if r.Err != nil {
				failed.Add(1)
			}
		})
	}
	if f := failed.Load(); f > 0 {
		t.Fatalf("%d scrapes failed", f)
	}
	if got := conns.Load(); got != n {
		t.Errorf("3 cycles over %d targets opened %d connections, want %d", n, got, n)
	}
	if got := s.conns.idleCount(); got != n {
		t.Errorf("%d idle connections kept, want %d", got, n)
	}
}

// TestIdleConnectionsBounded: no more than MaxIdleConns connections are
// kept; the other targets' scrapes still succeed, on new connections.
func TestIdleConnectionsBounded(t *testing.T) {
	ts, conns := loopbackTargets(t, 10, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("up 1\n"))
	})
	s := New(Config{MaxIdleConns: 4})
	t.Cleanup(s.CloseIdleConnections)
	for range 2 {
		s.Cycle(t.Context(), ts, func(r Result) {
			if r.Err != nil {
				t.Errorf("%s: %v", r.Target.Key, r.Err)
			}
		})
	}
	if got := s.conns.idleCount(); got != 4 {
		t.Errorf("%d idle connections, want 4", got)
	}
	if got := conns.Load(); got != 16 { // 10, then 6 new ones
		t.Errorf("%d connections over two cycles of 10 targets keeping 4, want 16", got)
	}
}

// TestScrapeRetriesAConnectionTheServerClosed: a server that closed the
// kept connection (its keep-alive timeout) costs the next scrape a new
// connection, not a failure.
func TestScrapeRetriesAConnectionTheServerClosed(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("up 1\n"))
	})
	s := New(Config{})
	t.Cleanup(s.CloseIdleConnections)
	for i := range 3 {
		if _, err := s.Scrape(t.Context(), srv.URL); err != nil {
			t.Fatalf("scrape %d: %v", i, err)
		}
		srv.CloseClientConnections()
	}
	if got := conns.Load(); got != 3 {
		t.Errorf("%d connections, want 3 (one per scrape, each closed by the server)", got)
	}
}

// TestScrapeResponseHeadersBounded: a target that sends endless headers
// fails with a limit once they pass 64 KiB.
func TestScrapeResponseHeadersBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for i := range 4000 {
			w.Header().Set(fmt.Sprintf("X-Pad-%d", i), strings.Repeat("x", 64))
		}
		_, _ = w.Write([]byte("up 1\n"))
	}))
	t.Cleanup(srv.Close)
	_, err := New(Config{}).Scrape(t.Context(), srv.URL)
	if Reason(err) != ReasonLimit {
		t.Errorf("reason %q (err %v), want %q", Reason(err), err, ReasonLimit)
	}
}
