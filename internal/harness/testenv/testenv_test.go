package testenv_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/internal/harness/testenv"
)

func TestFreePorts(t *testing.T) {
	ports, err := testenv.FreePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) != 5 {
		t.Fatalf("%d ports, want 5", len(ports))
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Errorf("ports %v: bad or repeated %d", ports, p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Errorf("port %d is not free once returned: %v", p, err)
			continue
		}
		l.Close()
	}
}

func TestHTTPOK(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			_, _ = w.Write([]byte("ok"))
		case "/hang":
			<-r.Context().Done()
		default:
			http.Error(w, "not ready", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	ports, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 200 * time.Millisecond}
	tests := []struct {
		name, url string
		want      bool
	}{
		{"200", srv.URL + "/ok", true},
		{"503", srv.URL + "/readyz", false},
		{"no answer within the client's timeout", srv.URL + "/hang", false},
		{"nothing listening", fmt.Sprintf("http://127.0.0.1:%d/ok", ports[0]), false},
		{"bad URL", "http://[::1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := testenv.HTTPOK(client, tt.url)(context.Background()); got != tt.want {
				t.Errorf("HTTPOK(%s) = %v, want %v", tt.url, got, tt.want)
			}
		})
	}
}

// recorder is a testenv.TB that records a failure instead of ending the
// test.
type recorder struct{ failed string }

func (*recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestWaitFor(t *testing.T) {
	// A wait that succeeds has a timeout far beyond its checks, so that a
	// loaded machine's late tick cannot end it first; the one that never
	// succeeds waits 500ms and names what it waited for.
	tests := []struct {
		name     string
		timeout  time.Duration
		cond     func(calls int) (bool, error)
		wantFail string // "" for success
		minCalls int
	}{
		{"true at once", time.Minute, func(int) (bool, error) { return true, nil }, "", 1},
		{"true at the third check", time.Minute, func(n int) (bool, error) { return n >= 3, nil }, "", 3},
		{"never true", 500 * time.Millisecond, func(int) (bool, error) { return false, nil }, "waiting 500ms for the thing", 1},
		{"an error ends the wait", time.Minute, func(int) (bool, error) { return false, errors.New("broken") }, "broken", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r recorder
			calls := 0
			testenv.WaitFor(&r, tt.timeout, "the thing", func(context.Context) (bool, error) {
				calls++
				return tt.cond(calls)
			})
			switch {
			case tt.wantFail == "" && r.failed != "":
				t.Errorf("failed: %s", r.failed)
			case tt.wantFail != "" && !strings.Contains(r.failed, tt.wantFail):
				t.Errorf("failure %q, want one naming %q", r.failed, tt.wantFail)
			}
			if calls < tt.minCalls {
				t.Errorf("%d checks, want at least %d", calls, tt.minCalls)
			}
		})
	}
}
