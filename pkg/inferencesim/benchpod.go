package inferencesim

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// The bench pods of hack/bench-list and pkg/adapter/gather's scrape benchmark:
// thousands of cheap vLLM-shaped targets, each writing the four families
// the adapter reads from its index and a clock, followed by the rest of a
// loaded simulated vLLM's exposition, which every real scrape carries and
// the adapter must read past.

// benchPodFamilies are the families a bench pod writes itself.
var benchPodFamilies = []string{"vllm:num_requests_waiting", "vllm:num_requests_running",
	"vllm:kv_cache_usage_perc", "vllm:time_to_first_token_seconds"}

// benchPodBounds is vLLM's TTFT bucket layout.
var benchPodBounds = []string{"0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0",
	"2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "160.0", "640.0", "2560.0", "+Inf"}

// BenchPodRest is a loaded simulated vLLM's exposition without the
// families a bench pod writes itself: request-level histograms and
// counters that the adapter skips.
func BenchPodRest() ([]byte, error) {
	body, err := Snapshot(Options{Dialect: VLLM, Rate: 10, Seed: 1}, time.Minute)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if !benchPodFamily(sc.Text()) {
			out.Write(sc.Bytes())
			out.WriteByte('\n')
		}
	}
	return out.Bytes(), sc.Err()
}

// benchPodFamily reports whether an exposition line belongs to a family
// a bench pod writes itself.
func benchPodFamily(line string) bool {
	for _, name := range benchPodFamilies {
		if strings.HasPrefix(line, name) || strings.HasPrefix(line, "# HELP "+name+" ") || strings.HasPrefix(line, "# TYPE "+name+" ") {
			return true
		}
	}
	return false
}

// BenchPodUptime is how long a bench pod's server had been up when the
// bench started. A fleet's servers have run for hours, so their TTFT
// counters stand far above a window's increase; a server started inside
// the window is the rare case where PromQL's extrapolation stops buckets
// at their zero point (and the adapter works each list's quantile out
// afresh), and a bench whose every pod started with it would time that.
const BenchPodUptime = time.Hour

// BenchPodHandler serves bench pod i's exposition: its queue, running
// requests and KV cache from i, a TTFT histogram of about 2 requests a
// second since BenchPodUptime before start (a tenth of them per bucket
// from le=0.1 up), then rest (BenchPodRest).
func BenchPodHandler(i int, start time.Time, rest []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		total := int((time.Since(start) + BenchPodUptime).Seconds() * 2)
		var sb strings.Builder
		fmt.Fprintf(&sb, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"llama\"} %d\n", i%9)
		fmt.Fprintf(&sb, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"llama\"} %d\n", 8+i%5)
		fmt.Fprintf(&sb, "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"llama\"} 0.%02d\n", i%100)
		sb.WriteString("# TYPE vllm:time_to_first_token_seconds histogram\n")
		for k, le := range benchPodBounds {
			c := min(total, max(0, (k-6)*total/10))
			if le == "+Inf" {
				c = total
			}
			fmt.Fprintf(&sb, "vllm:time_to_first_token_seconds_bucket{le=%q,model_name=\"llama\"} %d\n", le, c)
		}
		fmt.Fprintf(&sb, "vllm:time_to_first_token_seconds_sum{model_name=\"llama\"} %d\nvllm:time_to_first_token_seconds_count{model_name=\"llama\"} %d\n", total/2, total)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = io.WriteString(w, sb.String())
		_, _ = w.Write(rest)
	})
}
