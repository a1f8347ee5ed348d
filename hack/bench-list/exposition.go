package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

// vllmRest is what a loaded simulated vLLM exposes besides the four
// families each bench pod writes itself: request-level histograms and
// counters that the adapter skips, but that every real scrape carries and
// the adapter must read past.
func vllmRest() ([]byte, error) {
	now := time.Unix(1_700_000_000, 0)
	srv, err := inferencesim.NewServer(inferencesim.Options{Dialect: inferencesim.VLLM, Rate: 10, Seed: 1,
		Now: func() time.Time { return now }})
	if err != nil {
		return nil, err
	}
	now = now.Add(time.Minute)
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		return nil, fmt.Errorf("simulated vLLM /metrics: status %d", rec.Code)
	}
	var out bytes.Buffer
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		if !ownFamily(sc.Text()) {
			out.Write(sc.Bytes())
			out.WriteByte('\n')
		}
	}
	return out.Bytes(), sc.Err()
}

// ownFamily reports whether an exposition line belongs to a family the
// bench pods write themselves.
func ownFamily(line string) bool {
	for _, name := range []string{"vllm:num_requests_waiting", "vllm:num_requests_running",
		"vllm:kv_cache_usage_perc", "vllm:time_to_first_token_seconds"} {
		if strings.HasPrefix(line, name) || strings.HasPrefix(line, "# HELP "+name+" ") || strings.HasPrefix(line, "# TYPE "+name+" ") {
			return true
		}
	}
	return false
}
