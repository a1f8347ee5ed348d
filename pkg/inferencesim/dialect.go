package inferencesim

import (
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Dialect names the inference server whose metrics a Server exposes.
type Dialect string

// The dialects a Server can speak.
const (
	VLLM   Dialect = "vllm"
	SGLang Dialect = "sglang"
	TGI    Dialect = "tgi"
	Triton Dialect = "triton"
)

// Dialects lists every supported dialect.
var Dialects = []Dialect{VLLM, SGLang, TGI, Triton}

// ParseDialect returns the dialect named s.
func ParseDialect(s string) (Dialect, error) {
	for _, d := range Dialects {
		if string(d) == s {
			return d, nil
		}
	}
	return "", fmt.Errorf("inferencesim: unknown dialect %q (want vllm, sglang, tgi or triton)", s)
}

// Default TTFT bucket layouts, each in its server's unit, copied from the
// servers' sources (see docs/inferencesim.md).
var (
	// vllm/v1/metrics/loggers.py, histogram_time_to_first_token.
	vllmTTFTBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	// python/sglang/srt/metrics/collector.py, bucket_time_to_first_token.
	sglangTTFTBuckets = []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400}
	// triton core src/metric_model_reporter.h, histogram_options_ for
	// first_response_histogram, in milliseconds.
	tritonTTFTBucketsMs = []float64{100, 500, 2000, 5000}
	// text-generation-inference router: 35 geometric buckets from
	// 0.0001*1.5 s for every metric whose name ends in "duration".
	tgiDurationBuckets = prometheus.ExponentialBuckets(0.0001*1.5, 1.5, 35)
	// python/sglang/srt/metrics/collector.py, inter_token_latency_seconds.
	sglangITLBuckets = []float64{0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035,
		0.040, 0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000}
)

// exposition is one dialect's metric families on a server's private
// registry. Families a dialect lacks stay nil.
type exposition struct {
	waiting, running, kvUsage prometheus.Gauge

	ttft      prometheus.Histogram
	ttftScale float64 // seconds to the histogram's unit
	queueTime prometheus.Histogram
	// itl observes every token gap (SGLang); tpot each request's mean
	// gap (TGI). vLLM's are in requests.
	itl, tpot prometheus.Histogram

	success, promptTokens, genTokens, preemptions, inferences prometheus.Counter
	// successVec, when set, is registered in place of success, which is
	// one of its children, as is aborted.
	successVec prometheus.Collector
	aborted    prometheus.Counter
	// requests, for vLLM, are its request-level histograms.
	requests *vllmRequestStats
}

func newExposition(d Dialect, model string, ttftBuckets []float64, reg prometheus.Registerer) (*exposition, error) {
	var x *exposition
	switch d {
	case VLLM:
		x = vllmExposition(model, ttftBuckets)
	case SGLang:
		x = sglangExposition(model, ttftBuckets)
	case TGI:
		x = tgiExposition()
	case Triton:
		x = tritonExposition(model, ttftBuckets)
	default:
		return nil, fmt.Errorf("inferencesim: unknown dialect %q", d)
	}
	for _, c := range x.collectors() {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("inferencesim: register %s metrics: %w", d, err)
		}
	}
	return x, nil
}

func vllmExposition(model string, buckets []float64) *exposition {
	labels := prometheus.Labels{"model_name": model, "engine": "0"}
	success := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: labels,
	}, []string{"finished_reason"})
	// vLLM creates one series per finish reason up front; simulated
	// requests always end on a stop token.
	success.WithLabelValues("length")
	success.WithLabelValues("abort")
	return &exposition{
		waiting: gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels),
		running: gauge("vllm:num_requests_running", "Number of requests in model execution batches.", labels),
		kvUsage: gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels),
		ttft: histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
			labels, orDefault(buckets, vllmTTFTBuckets)),
		ttftScale:    1,
		success:      success.WithLabelValues("stop"),
		successVec:   success,
		aborted:      success.WithLabelValues("abort"),
		promptTokens: counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", labels),
		genTokens:    counter("vllm:generation_tokens_total", "Number of generation tokens processed.", labels),
		preemptions:  counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", labels),
		requests:     newVLLMRequestStats(labels),
	}
}

func sglangExposition(model string, buckets []float64) *exposition {
	labels := prometheus.Labels{"model_name": model}
	return &exposition{
		waiting: gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", labels),
		running: gauge("sglang:num_running_reqs", "The number of running requests.", labels),
		kvUsage: gauge("sglang:token_usage", "The token usage.", labels),
		ttft: histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
			labels, orDefault(buckets, sglangTTFTBuckets)),
		ttftScale:    1,
		itl:          histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", labels, sglangITLBuckets),
		success:      counter("sglang:num_requests_total", "Number of requests processed.", labels),
		promptTokens: counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", labels),
		genTokens:    counter("sglang:generation_tokens_total", "Number of generation tokens processed.", labels),
	}
}

// tgiExposition has no TTFT: TGI reports how long a request queued, not
// when its first token left.
func tgiExposition() *exposition {
	return &exposition{
		waiting:   gauge("tgi_queue_size", "Current queue size.", nil),
		running:   gauge("tgi_batch_current_size", "Current batch size.", nil),
		queueTime: histogram("tgi_request_queue_duration", "Time spent in the queue per request, in seconds.", nil, tgiDurationBuckets),
		tpot:      histogram("tgi_request_mean_time_per_token_duration", "Mean time per token per request, in seconds.", nil, tgiDurationBuckets),
		success:   counter("tgi_request_success", "Number of successful requests.", nil),
	}
}

// tritonExposition reports the first response in milliseconds, as Triton's
// histogram_latencies option does.
func tritonExposition(model string, buckets []float64) *exposition {
	labels := prometheus.Labels{"model": model, "version": "1"}
	return &exposition{
		waiting: gauge("nv_inference_pending_request_count",
			"Instantaneous number of pending requests awaiting execution per-model.", labels),
		ttft: histogram("nv_inference_first_response_histogram_ms",
			"Duration from request to first response in milliseconds", labels, orDefault(buckets, tritonTTFTBucketsMs)),
		ttftScale: 1000,
		success: counter("nv_inference_request_success",
			"Number of successful inference requests, all batch sizes", labels),
		inferences: counter("nv_inference_count",
			"Number of inferences performed (does not include cached requests)", labels),
	}
}

func (x *exposition) collectors() []prometheus.Collector {
	var success prometheus.Collector = x.success
	if x.successVec != nil {
		success = x.successVec
	}
	var out []prometheus.Collector
	for _, c := range []prometheus.Collector{x.waiting, x.running, x.kvUsage, x.ttft, x.queueTime, x.itl, x.tpot,
		success, x.promptTokens, x.genTokens, x.preemptions, x.inferences} {
		if c != nil {
			out = append(out, c)
		}
	}
	if x.requests != nil {
		out = append(out, x.requests.collectors()...)
	}
	return out
}

func (x *exposition) observeFinished(c Completion) {
	if x.requests != nil {
		x.requests.finished(c)
	}
	if x.tpot != nil && c.GeneratedTokens > 1 {
		// TGI: the request's decode time over its generated tokens.
		x.tpot.Observe((c.Total - c.FirstToken).Seconds() / float64(c.GeneratedTokens-1))
	}
}

func (x *exposition) observeToken(gap time.Duration) {
	if x.requests != nil {
		x.requests.token(gap)
	}
	if x.itl != nil {
		x.itl.Observe(gap.Seconds())
	}
}

func (x *exposition) observeTTFT(d time.Duration) {
	if x.ttft != nil {
		x.ttft.Observe(d.Seconds() * x.ttftScale)
	}
}

func (x *exposition) observeQueue(d time.Duration) {
	if x.queueTime != nil {
		x.queueTime.Observe(d.Seconds())
	}
}

// update sets the gauges to cur and adds to the counters what happened
// since prev.
func (x *exposition) update(prev, cur Stats) {
	set(x.waiting, float64(cur.Waiting))
	set(x.running, float64(cur.Running))
	set(x.kvUsage, cur.KVCacheUsage)
	add(x.success, cur.Completed-prev.Completed)
	add(x.inferences, cur.Completed-prev.Completed)
	add(x.promptTokens, cur.PromptTokens-prev.PromptTokens)
	add(x.genTokens, cur.GenerationTokens-prev.GenerationTokens)
	add(x.preemptions, cur.Preemptions-prev.Preemptions)
	add(x.aborted, cur.Aborted-prev.Aborted)
}

func gauge(name, help string, labels prometheus.Labels) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels})
}

func counter(name, help string, labels prometheus.Labels) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
}

func histogram(name, help string, labels prometheus.Labels, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: labels, Buckets: buckets})
}

func orDefault(buckets, def []float64) []float64 {
	if len(buckets) > 0 {
		return buckets
	}
	return def
}

func set(g prometheus.Gauge, v float64) {
	if g != nil {
		g.Set(v)
	}
}

func add(c prometheus.Counter, n uint64) {
	if c != nil && n > 0 {
		c.Add(float64(n))
	}
}

// validBuckets reports whether b is usable as histogram bounds.
func validBuckets(b []float64) error {
	for i, v := range b {
		if math.IsNaN(v) || math.IsInf(v, 0) || (i > 0 && v <= b[i-1]) {
			return fmt.Errorf("inferencesim: TTFT buckets must be finite and strictly increasing, got %v", b)
		}
	}
	return nil
}
