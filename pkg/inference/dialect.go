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
	// itl lists the inter-token latency (time per output token) histogram
	// families, in seconds, first present wins: a server that exports a
	// renamed family beside its deprecated name exports the same
	// observations twice, and only one is read. None: no ITL.
	itl []string
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
		// Both observe every output token after the first, the time
		// since the one before: inter_token_latency_seconds replaced
		// time_per_output_token_seconds in vLLM 0.11, which exports both
		// until the old name is hidden. request_time_per_output_token_
		// seconds, one mean per request, is not a distribution of token
		// gaps and is not read.
		itl: []string{"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"},
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
		// inter_token_latency_seconds (per token gap) replaced
		// time_per_output_token_seconds in SGLang's metrics collector.
		itl: []string{"sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"},
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
		// One observation per request: its decode time over its
		// generated tokens (router/src/server.rs), in seconds. A
		// quantile of it is a quantile over requests of their mean
		// token gap (TPOT), not over tokens.
		itl: []string{"tgi_request_mean_time_per_token_duration"},
	},
	{
		// Triton has no gauge of requests in execution (nv_inference_exec_count
		// is a counter of batches executed), so Running stays nil. Its
		// first-response histogram exists for decoupled models when
		// histogram latencies are enabled, in milliseconds. It has no
		// histogram of the gaps between responses (its latency counters
		// and summaries are per request), so no ITL either.
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
		names = append(names, m.itl...)
	}
	return names, prefixes
}
