// Package hostile serves what a hostile or broken tenant's pod can serve a
// scraper, on real sockets: the attack side of the hostile-target suite
// and of the soak (make soak).
package hostile

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// Kind is one way a tenant's pod can misbehave towards the scraper.
type Kind struct {
	Name string
	// Handler serves the pod's scrapes; nil for a pod that never answers.
	Handler http.Handler
	// PerPod, when set, makes each pod's handler, for a kind whose pods
	// each keep their own state (Handler is then unused).
	PerPod func() http.Handler
}

// Kinds are the misbehaviours a scraper must survive: bodies that never
// end or decompress to far more than they weigh, cardinality and label
// bombs, values no signal can hold, duplicate series, broken histograms,
// redirects to other hosts, a byte at a time, and silence. Each is served
// on real loopback sockets, as the adapter meets them in a cluster.
// redirectTo is where the redirect kind sends its scraper; the gzip bomb
// inflates to bombBytes.
func Kinds(redirectTo string, bombBytes int) ([]Kind, error) {
	bomb, err := gzipBomb(bombBytes)
	if err != nil {
		return nil, err
	}
	cardinality := seriesBody(100_000, 16)
	hugeLabels := seriesBody(8, 1<<20)
	text := func(body string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = io.WriteString(w, body)
		})
	}
	return []Kind{
		{Name: "endless", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			line := []byte("vllm:num_requests_waiting{model_name=\"llama\",replica=\"0000000000\"} 1\n")
			for i := 0; r.Context().Err() == nil; i++ {
				copy(line[len(line)-15:], fmt.Sprintf("%010d", i%1e10))
				if _, err := w.Write(line); err != nil {
					return
				}
			}
		})},
		{Name: "gzip-bomb", Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = w.Write(bomb)
		})},
		{Name: "cardinality", Handler: text(cardinality)},
		{Name: "huge-labels", Handler: text(hugeLabels)},
		{Name: "out-of-range", Handler: text("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"llama\"} 1e16\n" +
			"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"llama\"} +Inf\n" +
			"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"llama\"} 1e300\n")},
		{Name: "duplicates", Handler: text("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"llama\"} 3\nvllm:num_requests_waiting{model_name=\"llama\"} 4\n")},
		{Name: "bad-histogram", Handler: text("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"llama\"} 1\n" +
			"# TYPE vllm:time_to_first_token_seconds histogram\n" +
			"vllm:time_to_first_token_seconds_bucket{le=\"-1\",model_name=\"llama\"} 5\n" +
			"vllm:time_to_first_token_seconds_bucket{le=\"0.5\",model_name=\"llama\"} 3\n" +
			"vllm:time_to_first_token_seconds_bucket{le=\"+Inf\",model_name=\"llama\"} 9\n" +
			"vllm:time_to_first_token_seconds_sum{model_name=\"llama\"} -4\nvllm:time_to_first_token_seconds_count{model_name=\"llama\"} 9\n")},
		// Routers (pkg/adapter/inference/router.go): held counts no queue holds,
		// a series twice, more models than a router may name.
		{Name: "router-out-of-range", Handler: text("# TYPE inference_extension_flow_control_queue_size gauge\n" +
			"inference_extension_flow_control_queue_size{fairness_id=\"a\",model_name=\"llama\",target_model_name=\"llama\"} 1e16\n" +
			"inference_extension_flow_control_queue_size{fairness_id=\"a\",model_name=\"qwen\",target_model_name=\"qwen\"} NaN\n" +
			"inference_extension_flow_control_queue_size{fairness_id=\"a\",model_name=\"phi\",target_model_name=\"phi\"} -3\n")},
		{Name: "router-duplicates", Handler: text("# TYPE dynamo_frontend_queued_requests gauge\n" +
			"dynamo_frontend_queued_requests{model=\"llama\"} 3\ndynamo_frontend_queued_requests{model=\"llama\"} 4\n")},
		{Name: "router-models", Handler: text(routerModels(5000))},
		{Name: "redirect", Handler: http.RedirectHandler(redirectTo, http.StatusFound)},
		{Name: "slow-drip", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			rc := http.NewResponseController(w)
			for _, c := range []byte("vllm:num_requests_waiting{model_name=\"llama\"} 1\n") {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(time.Second):
				}
				_, _ = w.Write([]byte{c})
				_ = rc.Flush()
			}
		})},
		{Name: "silent"},
	}, nil
}

// gzipBomb is a gzip stream of n bytes of one repeated exposition line:
// about a thousandth of n on the wire.
func gzipBomb(n int) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	line := []byte("vllm:num_requests_waiting{model_name=\"llama\"} 1\n")
	chunk := bytes.Repeat(line, 64<<10/len(line))
	for written := 0; written < n; written += len(chunk) {
		if _, err := zw.Write(chunk); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// routerModels is a Dynamo frontend naming n models.
func routerModels(n int) string {
	var b strings.Builder
	b.WriteString("# TYPE dynamo_frontend_queued_requests gauge\n")
	for i := range n {
		fmt.Fprintf(&b, "dynamo_frontend_queued_requests{model=\"m%d\"} 1\n", i)
	}
	return b.String()
}

// seriesBody is n series of the queue-depth family, each with a label
// value of valueLen bytes: the families the adapter reads, so no filter
// skips them.
func seriesBody(n, valueLen int) string {
	var sb strings.Builder
	sb.WriteString("# TYPE vllm:num_requests_waiting gauge\n")
	pad := strings.Repeat("x", max(0, valueLen-10))
	for i := range n {
		fmt.Fprintf(&sb, "vllm:num_requests_waiting{model_name=\"llama\",replica=\"%s%010d\"} 1\n", pad, i)
	}
	return sb.String()
}

// Serve serves k on l until l is closed.
func Serve(l net.Listener, k Kind) {
	h := k.Handler
	if k.PerPod != nil {
		h = k.PerPod()
	}
	if h == nil {
		HoldSilent(l)
		return
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	_ = srv.Serve(l)
}

// HoldSilent accepts connections and never answers, until l is closed.
func HoldSilent(l net.Listener) {
	var held []net.Conn
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		// Read and drop the request so the client's write never blocks;
		// the answer never comes.
		go func() { _, _ = io.Copy(io.Discard, c) }()
		held = append(held, c)
		if len(held) > 1024 {
			_ = held[0].Close()
			held = held[1:]
		}
	}
}
