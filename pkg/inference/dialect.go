package inference

// mapping is how one dialect's metric names map onto Signals.
type mapping struct {
	dialect Dialect
	// prefix marks the dialect: any family whose name starts with it.
	prefix string
	// modelLabels name the model, first present wins; none for TGI.
	modelLabels []string
	queue       string
	running     string // empty: the server has no such gauge
	// kvCache lists alternative families, first present wins; their
	// values are multiplied by kvScale to get percent.
	kvCache []string
	kvScale float64
	ttft    string // a histogram family; empty: none
	// ttftScale converts TTFT bounds and sums to seconds.
	ttftScale float64
	// prefill is the histogram family of each request's time in prefill
	// (first scheduled to first token), in seconds; empty: none.
	prefill string
}

// mappings in detection priority. vLLM comes before Triton because Triton's
// vLLM backend exposes both vocabularies, and vLLM's has the running gauge
// that Triton lacks (its vllm: series carry the label model, hence the
// fallback).
var mappings = []mapping{
	{
		dialect:     VLLM,
		prefix:      "vllm:",
		modelLabels: []string{"model_name", "model"},
		queue:       "vllm:num_requests_waiting",
		running:     "vllm:num_requests_running",
		// kv_cache_usage_perc replaced gpu_cache_usage_perc in vLLM's V1
		// engine. Despite the names both are 0-1 fractions.
		kvCache:   []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
		kvScale:   100,
		ttft:      "vllm:time_to_first_token_seconds",
		ttftScale: 1,
		// Observed when a request finishes (vllm/v1/metrics/loggers.py).
		prefill: "vllm:request_prefill_time_seconds",
	},
	{
		dialect:     SGLang,
		prefix:      "sglang:",
		modelLabels: []string{"model_name"},
		queue:       "sglang:num_queue_reqs",
		running:     "sglang:num_running_reqs",
		// token_usage is the fraction of the KV token pool in use.
		kvCache:   []string{"sglang:token_usage"},
		kvScale:   100,
		ttft:      "sglang:time_to_first_token_seconds",
		ttftScale: 1,
	},
	{
		// TGI has no time-to-first-token histogram: tgi_request_queue_duration
		// is time spent queued only, not queue plus prefill, so TTFT stays
		// nil rather than faked from it. It exposes no KV-cache usage and
		// serves one unlabelled model.
		dialect: TGI,
		prefix:  "tgi_",
		queue:   "tgi_queue_size",
		running: "tgi_batch_current_size",
	},
	{
		// Triton has no gauge of requests in execution (nv_inference_exec_count
		// is a counter of batches executed), so Running stays nil. Its
		// first-response histogram exists for decoupled models when
		// histogram latencies are enabled, in milliseconds.
		dialect:     Triton,
		prefix:      "nv_inference_",
		modelLabels: []string{"model"},
		queue:       "nv_inference_pending_request_count",
		ttft:        "nv_inference_first_response_histogram_ms",
		ttftScale:   0.001,
	},
}

// Families returns what Detect reads of a scrape: the families of every
// dialect's signals, and the dialects' prefixes, of which
// Detect needs one family to tell the dialect when none of the signals is
// there. A scraper may skip everything else.
func Families() (names, prefixes []string) {
	for _, m := range mappings {
		prefixes = append(prefixes, m.prefix)
		names = append(names, m.queue)
		if m.running != "" {
			names = append(names, m.running)
		}
		names = append(names, m.kvCache...)
		if m.ttft != "" {
			names = append(names, m.ttft)
		}
		if m.prefill != "" {
			names = append(names, m.prefill)
		}
	}
	return names, prefixes
}
