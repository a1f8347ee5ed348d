package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscale/gpuscale/pkg/exporter"
	"github.com/gpuscale/gpuscale/pkg/exporter/backend/sim"
	"github.com/gpuscale/gpuscale/pkg/exporter/httpapi"
)

// smallBuffers is a listener whose connections have a 4 KiB send buffer,
// so that a response larger than that blocks its handler until the client
// reads it: how a client that never reads holds a slot on a real network.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// holdScrape sends GET /metrics and never reads the answer, with a small
// receive buffer: the exporter's handler blocks writing it.
func holdScrape(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := fmt.Fprintf(c, "GET /metrics HTTP/1.1\r\nHost: exporter\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestReservedLaneUnderFlood: with no NetworkPolicy, any pod can flood a
// node's exporter. Clients that never read their answers hold every
// ordinary slot and every other ordinary scrape is refused, yet the
// adapter's scrapes, which carry the reserved lane's token, are all
// served; a wrong token is an ordinary scrape.
func TestReservedLaneUnderFlood(t *testing.T) {
	b, err := sim.New(sim.Options{GPUs: 64, Identity: "node-a"}) // a 1 MiB exposition
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	col, err := exporter.NewCollector(exporter.Config{Backend: b, Hostname: "node-a", Interval: time.Second, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := col.CollectOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	const token, limit = "adapter-token-0123456789", 4
	srv := httptest.NewUnstartedServer(httpapi.New(httpapi.Config{Source: col, Gatherer: reg, Registerer: reg,
		MaxRequests: limit, MaxRequestsWait: 0, ReservedToken: func() []byte { return []byte(token) }, ReservedMaxRequests: 2, ReservedMaxRequestsWait: time.Second}))
	srv.Listener = smallBuffers{srv.Listener}
	srv.Start()
	defer srv.Close()
	addr := srv.Listener.Addr().String()

	var held []net.Conn
	// Before srv.Close, which waits for the handlers writing to them.
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range limit {
		held = append(held, holdScrape(t, addr))
	}
	awaitInFlight(t, reg, "metrics", limit)

	scrape := func(auth string) int {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// The flood: every ordinary scrape refused at once.
	var wg sync.WaitGroup
	floodCodes := make(chan int, 100)
	for range cap(floodCodes) {
		wg.Go(func() { floodCodes <- scrape("") })
	}
	// Meanwhile the adapter scrapes, as each of its replicas does once per
	// cycle; none waits behind the flood.
	for i := range 20 {
		if code := scrape(token); code != http.StatusOK {
			t.Errorf("adapter scrape %d during the flood: %d, want 200", i, code)
		}
	}
	wg.Wait()
	close(floodCodes)
	refused := 0
	for code := range floodCodes {
		if code == http.StatusServiceUnavailable {
			refused++
		}
	}
	if refused != cap(floodCodes) {
		t.Errorf("%d of %d flood scrapes refused while the slots were held, want all", refused, cap(floodCodes))
	}
	if code := scrape("not-the-token"); code != http.StatusServiceUnavailable {
		t.Errorf("a wrong token: %d, want the ordinary lane's 503", code)
	}
	if got := metricValue(t, reg, "gpuscale_exporter_http_requests_refused_total", "reserved"); got != 0 {
		t.Errorf("%v reserved-lane scrapes refused", got)
	}
}
