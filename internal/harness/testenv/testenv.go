// Package testenv holds what the tests and local environments need to run
// servers on loopback and wait for them: free ports, a readiness probe,
// and a bounded wait for a condition.
package testenv

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// FreePorts returns n distinct TCP ports that were free on 127.0.0.1. It
// holds each until it has them all, so they differ; another process may
// still take one before its server binds it, which a caller that starts
// servers must expect.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testenv: find a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// HTTPOK returns a check that GETs url with client and succeeds on 200:
// a readiness probe. Bound each request with the client's Timeout, so
// that a hung server is retried rather than stalling the wait.
func HTTPOK(client *http.Client, url string) func(context.Context) bool {
	return func(ctx context.Context) bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false
		}
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode == http.StatusOK
	}
}

// TB is the part of testing.TB that WaitFor uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// PollInterval is how often WaitFor checks its condition.
const PollInterval = 200 * time.Millisecond

// WaitFor checks cond at once and then every PollInterval until it is
// true, and returns how long that took. The test fails, naming what it
// waited for, when timeout passes first or cond returns an error.
func WaitFor(t TB, timeout time.Duration, what string, cond func(context.Context) (bool, error)) time.Duration {
	t.Helper()
	start := time.Now()
	if err := wait.PollUntilContextTimeout(context.Background(), PollInterval, timeout, true, cond); err != nil {
		t.Fatalf("waiting %v for %s: %v", timeout, what, err)
	}
	return time.Since(start)
}
