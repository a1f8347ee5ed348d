package dialect

// The units families come in, as Reading.Scale.
const (
	// Count is a number of requests, as the signal counts them.
	Count = 1
	// Fraction is a 0-1 fraction, the signal being a percentage.
	Fraction = 100
	// Seconds is the histogram signals' own unit.
	Seconds = 1
	// Milliseconds are a thousandth of the signals' seconds.
	Milliseconds = 1.0 / 1000
)

// Engines are the dialects in detection priority: a scrape with families of
// several is read as the first, and a PromQL default takes each pod's value
// from the first engine that has one. vLLM comes before Triton because
// Triton's vLLM backend exposes both vocabularies, and vLLM's has the
// running gauge that Triton lacks (its vllm: series carry the label model,
// hence vLLM's second model label).
//
// Bucket layouts are the servers' defaults, copied from their sources (see
// docs/inferencesim.md).
var Engines = []Engine{
	{
		Name:        VLLM,
		Prefix:      "vllm:",
		ModelLabels: []string{"model_name", "model"},
		Labels:      map[string]string{"engine": "0"},
		Reads: map[Signal]Reading{
			Queue:   {Families: []string{"vllm:num_requests_waiting"}, Scale: Count, Help: "Number of requests waiting to be processed."},
			Running: {Families: []string{"vllm:num_requests_running"}, Scale: Count, Help: "Number of requests in model execution batches."},
			// kv_cache_usage_perc replaced gpu_cache_usage_perc in
			// vLLM's V1 engine. Despite the names both are 0-1
			// fractions.
			KVCache: {Families: []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}, Scale: Fraction,
				Help: "KV-cache usage. 1 means 100 percent usage."},
			// vllm/v1/metrics/loggers.py, histogram_time_to_first_token.
			TTFT: {Families: []string{"vllm:time_to_first_token_seconds"}, Scale: Seconds,
				Help: "Histogram of time to first token in seconds.",
				Buckets: []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
					0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}},
			// Observed when a request finishes (vllm/v1/metrics/loggers.py),
			// in the layout of vLLM's request-level latencies.
			Prefill: {Families: []string{"vllm:request_prefill_time_seconds"}, Scale: Seconds,
				Help: "Histogram of time spent in PREFILL phase for request.",
				Buckets: []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
					40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}},
			// Both observe every output token after the first, the time
			// since the one before: inter_token_latency_seconds replaced
			// time_per_output_token_seconds in vLLM 0.11, which exports
			// both until the old name is hidden. request_time_per_output_
			// token_seconds, one mean per request, is not a distribution
			// of token gaps and is not read.
			ITL: {Families: []string{"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"}, Scale: Seconds,
				Help: "Histogram of inter-token latency in seconds.",
				Buckets: []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
					1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}},
		},
	},
	{
		Name:        SGLang,
		Prefix:      "sglang:",
		ModelLabels: []string{"model_name"},
		Reads: map[Signal]Reading{
			Queue:   {Families: []string{"sglang:num_queue_reqs"}, Scale: Count, Help: "The number of requests in the waiting queue."},
			Running: {Families: []string{"sglang:num_running_reqs"}, Scale: Count, Help: "The number of running requests."},
			// token_usage is the fraction of the KV token pool in use.
			KVCache: {Families: []string{"sglang:token_usage"}, Scale: Fraction, Help: "The token usage."},
			// python/sglang/srt/metrics/collector.py, bucket_time_to_first_token.
			TTFT: {Families: []string{"sglang:time_to_first_token_seconds"}, Scale: Seconds,
				Help:    "Histogram of time to first token in seconds.",
				Buckets: []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400}},
			// inter_token_latency_seconds (per token gap) replaced
			// time_per_output_token_seconds in SGLang's metrics
			// collector (python/sglang/srt/metrics/collector.py).
			ITL: {Families: []string{"sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"}, Scale: Seconds,
				Help: "Histogram of inter-token latency in seconds.",
				Buckets: []float64{0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035,
					0.040, 0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000}},
		},
	},
	{
		// TGI has no time-to-first-token histogram: tgi_request_queue_duration
		// is time spent queued only, not queue plus prefill, so TTFT stays
		// nil rather than faked from it. It exposes no KV-cache usage and
		// serves one unlabelled model.
		Name:   TGI,
		Prefix: "tgi_",
		Reads: map[Signal]Reading{
			Queue:   {Families: []string{"tgi_queue_size"}, Scale: Count, Help: "Current queue size."},
			Running: {Families: []string{"tgi_batch_current_size"}, Scale: Count, Help: "Current batch size."},
			// One observation per request: its decode time over its
			// generated tokens (router/src/server.rs), in seconds. A
			// quantile of it is a quantile over requests of their mean
			// token gap (TPOT), not over tokens. The router gives every
			// metric whose name ends in "duration" 35 geometric buckets
			// from 0.0001*1.5 s.
			ITL: {Families: []string{"tgi_request_mean_time_per_token_duration"}, Scale: Seconds, PerRequestMean: true,
				Help: "Mean time per token per request, in seconds.", Buckets: exponential(0.0001*1.5, 1.5, 35)},
		},
	},
	{
		// Triton has no gauge of requests in execution (nv_inference_exec_count
		// is a counter of batches executed), so Running stays nil. Its
		// first-response histogram exists for decoupled models when
		// histogram latencies are enabled, in milliseconds. It has no
		// histogram of the gaps between responses (its latency counters
		// and summaries are per request), so no ITL either.
		Name:        Triton,
		Prefix:      "nv_inference_",
		ModelLabels: []string{"model"},
		Labels:      map[string]string{"version": "1"},
		Reads: map[Signal]Reading{
			Queue: {Families: []string{"nv_inference_pending_request_count"}, Scale: Count,
				Help: "Instantaneous number of pending requests awaiting execution per-model."},
			// core src/metric_model_reporter.h, histogram_options_ for
			// first_response_histogram.
			TTFT: {Families: []string{"nv_inference_first_response_histogram_ms"}, Scale: Milliseconds,
				Help: "Duration from request to first response in milliseconds", Buckets: []float64{100, 500, 2000, 5000}},
		},
	},
}
