package main

import (
	"bufio"
	"bytes"
	"strings"
	"time"

	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

// vllmRest is what a loaded simulated vLLM exposes besides the four
// families each bench pod writes itself: request-level histograms and
// counters that the adapter skips, but that every real scrape carries and
// the adapter must read past.
func vllmRest() ([]byte, error) {
	body, err := inferencesim.Snapshot(inferencesim.Options{Dialect: inferencesim.VLLM, Rate: 10, Seed: 1}, time.Minute)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(body))
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
