package hostile

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
)

// Within every per-scrape limit (10,000 series, label values of 2,048
// bytes, 4,096 distinct values of a label, 4 MiB), a tenant's pod can still
// make the adapter keep, compute or wait as much as it can. The kinds of
// the second round: each is what one pod serves; its siblings answer as a
// healthy vLLM or router would, so that only the misbehaviour is tested.

// TenantKinds are the second round's misbehaviours:
//
//   - hang-after-answer answers its first scrape as a healthy vLLM, then
//     accepts every later one and never answers;
//   - model-names names 1,800 models of 2,000 bytes (3.6 MB);
//   - router-names is a Dynamo frontend naming 1,900 models of 2,000
//     bytes (3.9 MB);
//   - router-most-models is one naming 4,096 models of 256 bytes, the longest
//     name kept;
//   - histogram-buckets serves TTFT and prefill-time histograms of 4,095
//     buckets beside an ordinary queue;
//   - capacity-inputs runs 1,000 requests in a KV cache 1e-10 in use:
//     1e13 slots a replica, every value in range;
//   - names-kept and router-kept keep the most an inference pod and a
//     router pod may keep: four names of 255 bytes (1,023 bytes joined)
//     and 64-bucket histograms; eight names of 256 bytes.
func TenantKinds() []Kind {
	text := func(body string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = io.WriteString(w, body)
		})
	}
	return []Kind{
		{Name: "hang-after-answer", PerPod: HangAfterAnswer},
		{Name: "model-names", Handler: text(modelNames(1800, 2000))},
		{Name: "router-names", Handler: text(routerNames(1900, 2000))},
		{Name: "router-most-models", Handler: text(routerNames(4096, 256))},
		{Name: "histogram-buckets", Handler: text(histograms(4095, "m") +
			"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 1\n")},
		{Name: "capacity-inputs", Handler: text(CapacityInputs("m"))},
		{Name: "names-kept", Handler: text(namesKept())},
		{Name: "router-kept", Handler: text(routerNames(8, 256))},
	}
}

// healthyVLLM is a small healthy exposition.
const healthyVLLM = "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 1\n" +
	"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 2\n" +
	"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.1\n"

// HangAfterAnswer is one pod's handler that answers its first scrape as a
// healthy vLLM and hangs on every later one until the scraper gives up.
func HangAfterAnswer() http.Handler {
	var once sync.Once
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answered := false
		once.Do(func() {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = io.WriteString(w, healthyVLLM)
			answered = true
		})
		if !answered {
			<-r.Context().Done()
		}
	})
}

// CapacityInputs is a vLLM whose values are all in range and whose slots
// (running over KV cache in use) are 1e13.
func CapacityInputs(model string) string {
	return fmt.Sprintf("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=%q} 1000\n"+
		"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=%q} 5\n"+
		"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=%q} 1e-10\n", model, model, model)
}

// name is the i-th model name of n bytes.
func name(i, n int) string {
	id := fmt.Sprintf("-%06d", i)
	return strings.Repeat("m", max(0, n-len(id))) + id
}

// modelNames is a vLLM queue split over n models of size-byte names.
func modelNames(n, size int) string {
	var b strings.Builder
	b.WriteString("# TYPE vllm:num_requests_waiting gauge\n")
	for i := range n {
		fmt.Fprintf(&b, "vllm:num_requests_waiting{model_name=%q} 1\n", name(i, size))
	}
	return b.String()
}

// routerNames is a Dynamo frontend holding a request for each of n models
// of size-byte names.
func routerNames(n, size int) string {
	var b strings.Builder
	b.WriteString("# TYPE dynamo_frontend_queued_requests gauge\n")
	for i := range n {
		fmt.Fprintf(&b, "dynamo_frontend_queued_requests{model=%q} 1\n", name(i, size))
	}
	return b.String()
}

// histograms are vLLM's TTFT and prefill-time histograms of model, with
// buckets finite bounds each, and +Inf.
func histograms(buckets int, model string) string {
	var b strings.Builder
	for _, family := range []string{"vllm:time_to_first_token_seconds", "vllm:request_prefill_time_seconds"} {
		fmt.Fprintf(&b, "# TYPE %s histogram\n", family)
		for i := range buckets {
			fmt.Fprintf(&b, "%s_bucket{model_name=%q,le=\"%g\"} %d\n", family, model, math.Round(float64(i+1)*1e3)/1e4, i)
		}
		fmt.Fprintf(&b, "%s_bucket{model_name=%q,le=\"+Inf\"} %d\n%s_count{model_name=%q} %d\n%s_sum{model_name=%q} %d\n",
			family, model, buckets, family, model, buckets, family, model, buckets)
	}
	return b.String()
}

// namesKept is a vLLM serving four models of 255-byte names (1,023 bytes
// joined, one under the most kept) with 64-bucket histograms each.
func namesKept() string {
	var b strings.Builder
	b.WriteString("# TYPE vllm:num_requests_waiting gauge\n")
	for i := range 4 {
		fmt.Fprintf(&b, "vllm:num_requests_waiting{model_name=%q} 1\n", name(i, 255))
	}
	b.WriteString(histograms(63, name(0, 255)))
	return b.String()
}
