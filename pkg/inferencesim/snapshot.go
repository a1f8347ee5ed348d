package inferencesim

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"
)

// Snapshot runs a server with opts for loaded simulated time on a clock of
// its own, and returns its exposition in the classic text format: a real
// sized body for benchmarks and load harnesses that serve the same one
// many times. opts.Now is ignored.
func Snapshot(opts Options, loaded time.Duration) ([]byte, error) {
	now := time.Unix(1_700_000_000, 0)
	opts.Now = func() time.Time { return now }
	srv, err := NewServer(opts)
	if err != nil {
		return nil, err
	}
	now = now.Add(loaded)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	srv.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return nil, fmt.Errorf("inferencesim: snapshot: /metrics answered %d", rec.Code)
	}
	return rec.Body.Bytes(), nil
}
