package app_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// trickle writes prefix, then one byte of filler every 20 ms until the
// connection fails or stop is closed; it returns the write error.
func trickle(conn net.Conn, prefix string, stop <-chan struct{}) error {
	if _, err := io.WriteString(conn, prefix); err != nil {
		return err
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return nil
		case <-t.C:
		}
		if _, err := conn.Write([]byte("a")); err != nil {
			return err
		}
	}
}

// TestSlowClientsCutOff runs the exporter with short timeouts against
// clients that send their request a byte at a time (slowloris): each is
// disconnected within its timeout, and a normal scrape is served meanwhile.
func TestSlowClientsCutOff(t *testing.T) {
	o := simOptions("")
	o.ReadHeaderTimeout = 300 * time.Millisecond
	o.ReadTimeout = 600 * time.Millisecond
	p := start(t, o)
	// Listening comes before the first collection: wait for it, or the
	// scrape below may find no GPU series yet.
	eventually(t, "ready", func() error {
		if code, _ := get(t, http.DefaultClient, "http://"+p.addr+"/readyz"); code != http.StatusOK {
			return fmt.Errorf("readyz %d", code)
		}
		return nil
	})
	tests := []struct {
		name    string
		request string
		within  time.Duration
	}{
		{"headers a byte at a time", "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ", o.ReadHeaderTimeout},
		{"body a byte at a time", "PUT /api/v1/sim/gpus/0 HTTP/1.1\r\nHost: x\r\nContent-Length: 4000\r\n\r\n{\"utilization\":1", o.ReadTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", p.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			stop := make(chan struct{})
			defer close(stop)
			start := time.Now()
			go func() { _ = trickle(conn, tc.request, stop) }()

			// A well-behaved scrape is served while the slow client holds on.
			if code, body := get(t, http.DefaultClient, "http://"+p.addr+"/metrics"); code != 200 || !strings.Contains(body, "DCGM_FI_DEV_GPU_UTIL") {
				t.Errorf("scrape beside a slow client: %d", code)
			}
			// The trickle never ends by itself, so the connection ending at
			// all (an answer and a close, or just a close) is the cut-off.
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = io.Copy(io.Discard, bufio.NewReader(conn))
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection still open after %v; want it closed within about %v", time.Since(start), tc.within)
			}
		})
	}
}

// TestMaxRequestsFlag holds the --web.max-requests API slots with load
// changes whose bodies never finish: API requests are refused with 503
// while they hold, scrapes are served all along (they have slots of their
// own), and the API is served again once the holders are gone.
func TestMaxRequestsFlag(t *testing.T) {
	o := simOptions("")
	o.MaxRequests = 2
	o.MaxRequestsWait = 50 * time.Millisecond
	// Readiness is a collection no older than three intervals: long
	// enough here that a loaded machine (-race, parallel packages) never
	// makes the probe about freshness rather than the API limit.
	o.CollectInterval = time.Second
	o.ReadTimeout = time.Minute // the holders are cut off by the test, not by the timeout
	p := start(t, o)
	base := "http://" + p.addr
	fetchGPUs(t, base) // collected once

	var holders []net.Conn
	for range o.MaxRequests {
		conn, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := fmt.Fprint(conn, "PUT /api/v1/sim/gpus/0 HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
		holders = append(holders, conn)
	}
	eventually(t, "API requests refused while every API slot is held", func() error {
		resp, err := http.Get(base + "/api/v1/gpus")
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "limit 2") {
			return fmt.Errorf("status %d: %.100s", resp.StatusCode, body)
		}
		return nil
	})
	for range 3 {
		if code, _ := get(t, http.DefaultClient, base+"/metrics"); code != 200 {
			t.Errorf("/metrics while the API is saturated: %d, want 200", code)
		}
	}
	if code, _ := get(t, http.DefaultClient, base+"/readyz"); code != 200 {
		t.Errorf("/readyz while saturated: %d, want 200", code)
	}
	for _, c := range holders {
		c.Close()
	}
	eventually(t, "API requests served once the slots are free", func() error {
		if code, _ := get(t, http.DefaultClient, base+"/api/v1/gpus"); code != 200 {
			return fmt.Errorf("status %d", code)
		}
		_, body := get(t, http.DefaultClient, base+"/metrics")
		if !strings.Contains(body, `gpuscale_exporter_http_requests_refused_total{handler="api"} `) ||
			strings.Contains(body, `gpuscale_exporter_http_requests_refused_total{handler="api"} 0`+"\n") {
			return errors.New(`gpuscale_exporter_http_requests_refused_total{handler="api"} missing or 0`)
		}
		return nil
	})
}
