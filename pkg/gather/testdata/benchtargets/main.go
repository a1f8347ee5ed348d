// Command benchtargets serves, for BenchmarkCycleScrapes, n simulated vLLM
// servers on their own loopback addresses (127.B.x.y:port), each with a
// loaded vLLM's whole exposition: the gauges and TTFT histogram the adapter
// reads, values distinct per server, and the rest of what a vLLM exposes.
// It runs apart from the benchmark so that the benchmark's CPU time is the
// scraper's alone. It prints "ready" once every server listens and serves
// until its standard input closes.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

func main() {
	n := flag.Int("n", 2000, "servers")
	base := flag.Int("net", 3, "the B of 127.B.x.y")
	port := flag.Int("port", 8000, "port of every server")
	flag.Parse()
	if err := run(*n, *base, *port); err != nil {
		fmt.Fprintln(os.Stderr, "benchtargets:", err)
		os.Exit(1)
	}
}

func run(n, base, port int) error {
	rest, err := vllmRest()
	if err != nil {
		return err
	}
	start := time.Now()
	for i := range n {
		addr := net.JoinHostPort(Addr(base, i), strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: exposition(i, start, rest), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
		go func() { _ = srv.Serve(l) }()
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// Addr is server i's address.
func Addr(base, i int) string {
	return fmt.Sprintf("127.%d.%d.%d", base, 1+i/250, 1+i%250)
}

var bounds = []string{"0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0",
	"2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "160.0", "640.0", "2560.0", "+Inf"}

func exposition(i int, start time.Time, rest []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		total := int(time.Since(start).Seconds() * 2)
		var sb strings.Builder
		fmt.Fprintf(&sb, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"llama\"} %d\n", i%9)
		fmt.Fprintf(&sb, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"llama\"} %d\n", 8+i%5)
		fmt.Fprintf(&sb, "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"llama\"} 0.%02d\n", i%100)
		sb.WriteString("# TYPE vllm:time_to_first_token_seconds histogram\n")
		for k, le := range bounds {
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

// vllmRest is the rest of a loaded simulated vLLM's exposition.
func vllmRest() ([]byte, error) {
	body, err := inferencesim.Snapshot(inferencesim.Options{Dialect: inferencesim.VLLM, Rate: 10, Seed: 1}, time.Minute)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		own := false
		for _, name := range []string{"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:time_to_first_token_seconds"} {
			line := sc.Text()
			if strings.HasPrefix(line, name) || strings.HasPrefix(line, "# HELP "+name+" ") || strings.HasPrefix(line, "# TYPE "+name+" ") {
				own = true
			}
		}
		if !own {
			out.Write(sc.Bytes())
			out.WriteByte('\n')
		}
	}
	return out.Bytes(), sc.Err()
}
