package inferencesim

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscale/gpuscale/pkg/signal/dialect"
)

// Bucket layouts of vLLM's per-request histograms (vllm/v1/metrics/
// loggers.py), so that a simulated vLLM exposition is as large, and as
// costly to scrape, as a real one.
// The request latencies share the layout of vllm:request_prefill_time_seconds,
// the token latencies that of vllm:inter_token_latency_seconds: the dialect
// table's.
var (
	vllmRequestLatencyBuckets = buckets(dialect.VLLM, dialect.Prefill)
	vllmTokenLatencyBuckets   = buckets(dialect.VLLM, dialect.ITL)
	// build_1_2_5_buckets up to a 32k-token max_model_len.
	vllmTokenCountBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000}
	vllmParamsNBuckets    = []float64{1, 2, 5, 10, 20}
)

// VLLMRequestLatencyBuckets returns the bounds of vLLM's request-level
// latency histograms, vllm:e2e_request_latency_seconds among them.
func VLLMRequestLatencyBuckets() []float64 { return slices.Clone(vllmRequestLatencyBuckets) }

// vllmRequestStats are the request-level histograms vLLM keeps beside its
// signals' (TTFT, prefill, inter-token latency): what the adapter does not
// read, but every real scrape carries.
type vllmRequestStats struct {
	e2e, queue, inference, decode      prometheus.Histogram
	perOutputToken                     prometheus.Histogram
	promptTokens, genTokens, maxTokens prometheus.Histogram
	maxGenTokens, paramsN              prometheus.Histogram
	prefixQueries                      prometheus.Counter
	prefixHits                         prometheus.Counter
	cacheConfig                        prometheus.Gauge
}

func newVLLMRequestStats(labels prometheus.Labels) *vllmRequestStats {
	info := prometheus.Labels{"block_size": "16", "cache_dtype": "auto", "enable_prefix_caching": "True",
		"gpu_memory_utilization": "0.9", "num_gpu_blocks": "27000", "swap_space": "4"}
	v := &vllmRequestStats{
		e2e:            histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", labels, vllmRequestLatencyBuckets),
		queue:          histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", labels, vllmRequestLatencyBuckets),
		inference:      histogram("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", labels, vllmRequestLatencyBuckets),
		decode:         histogram("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", labels, vllmRequestLatencyBuckets),
		perOutputToken: histogram("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", labels, vllmTokenLatencyBuckets),
		promptTokens:   histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", labels, vllmTokenCountBuckets),
		genTokens:      histogram("vllm:request_generation_tokens", "Number of generation tokens processed.", labels, vllmTokenCountBuckets),
		maxTokens:      histogram("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", labels, vllmTokenCountBuckets),
		maxGenTokens:   histogram("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.", labels, vllmTokenCountBuckets),
		paramsN:        histogram("vllm:request_params_n", "Histogram of the n request parameter.", labels, vllmParamsNBuckets),
		prefixQueries:  counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", labels),
		prefixHits:     counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", labels),
		cacheConfig:    gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig.", info),
	}
	v.cacheConfig.Set(1)
	return v
}

func (v *vllmRequestStats) collectors() []prometheus.Collector {
	return []prometheus.Collector{v.e2e, v.queue, v.inference, v.decode, v.perOutputToken,
		v.promptTokens, v.genTokens, v.maxTokens, v.maxGenTokens, v.paramsN, v.prefixQueries, v.prefixHits, v.cacheConfig}
}

// token records the gap before an output token, as vLLM does for every
// token after a request's first, under the deprecated name that 0.11
// exports beside the signal's (inter_token_latency_seconds).
func (v *vllmRequestStats) token(gap time.Duration) {
	v.perOutputToken.Observe(gap.Seconds())
}

// finished records a completed request as vLLM does when it finishes one.
func (v *vllmRequestStats) finished(c Completion) {
	v.e2e.Observe(c.Total.Seconds())
	v.queue.Observe(c.Queued.Seconds())
	v.inference.Observe((c.Total - c.Queued).Seconds())
	v.decode.Observe((c.Total - c.FirstToken).Seconds())
	v.promptTokens.Observe(float64(c.ContextTokens))
	v.genTokens.Observe(float64(c.GeneratedTokens))
	v.maxTokens.Observe(float64(c.GeneratedTokens))
	v.maxGenTokens.Observe(float64(c.GeneratedTokens))
	v.paramsN.Observe(1)
	v.prefixQueries.Add(float64(c.ContextTokens))
}
