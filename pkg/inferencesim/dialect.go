package inferencesim

import (
	"fmt"
	"maps"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscale/gpuscale/pkg/signal/dialect"
)

// Dialect names the inference server whose metrics a Server exposes: an
// engine of the dialect table (pkg/signal/dialect).
type Dialect = dialect.Name

// The dialects a Server can speak.
const (
	VLLM   = dialect.VLLM
	SGLang = dialect.SGLang
	TGI    = dialect.TGI
	Triton = dialect.Triton
)

// Dialects lists every supported dialect: the table's engines.
var Dialects = dialect.Names()

// ParseDialect returns the dialect named s.
func ParseDialect(s string) (Dialect, error) {
	for _, d := range Dialects {
		if string(d) == s {
			return d, nil
		}
	}
	return "", fmt.Errorf("inferencesim: unknown dialect %q (want %s)", s, dialectNames)
}

var dialectNames = dialect.Enumerate(func(e *dialect.Engine) string { return string(e.Name) })

// Bucket layouts of the families the simulator serves beside the signals',
// in the layouts of the signals' families that the servers share them with
// (see docs/inferencesim.md).
var (
	// text-generation-inference router: 35 geometric buckets from
	// 0.0001*1.5 s for every metric whose name ends in "duration".
	tgiDurationBuckets = buckets(dialect.TGI, dialect.ITL)
	// python/sglang/srt/metrics/collector.py, inter_token_latency_seconds.
	sglangITLBuckets = buckets(dialect.SGLang, dialect.ITL)
)

// buckets are the table's bucket layout of d's family of s.
func buckets(d dialect.Name, s dialect.Signal) []float64 {
	e, ok := dialect.Lookup(d)
	if !ok || len(e.Reads[s].Buckets) == 0 {
		panic(fmt.Sprintf("inferencesim: the dialect table has no %s buckets for %s", s, d))
	}
	return e.Reads[s].Buckets
}

// exposition is one dialect's metric families on a server's private
// registry: the signals' families, as the dialect table names them, and
// those each server carries besides (extras). Families a dialect lacks stay
// nil.
type exposition struct {
	waiting, running, kvUsage prometheus.Gauge
	kvScale                   float64 // the engine's KV-cache fraction to the family's unit

	ttft      prometheus.Histogram
	ttftScale float64 // seconds to the histogram's unit
	// prefill observes each finished request's time in prefill.
	prefill      prometheus.Histogram
	prefillScale float64
	// itl observes every token gap, or with itlPerRequest each finished
	// request's mean gap (TGI's TPOT).
	itl           prometheus.Histogram
	itlScale      float64
	itlPerRequest bool
	queueTime     prometheus.Histogram

	success, promptTokens, genTokens, preemptions, inferences prometheus.Counter
	// successVec, when set, is registered in place of success, which is
	// one of its children, as is aborted.
	successVec prometheus.Collector
	aborted    prometheus.Counter
	// requests, for vLLM, are its request-level histograms.
	requests *vllmRequestStats
}

// extras add to an exposition the families a server carries beside its
// signals', with the server's labels: counters the demo's dashboards show,
// histograms that make a scrape as large as a real one. A dialect without
// extras serves its signals only.
var extras = map[Dialect]func(x *exposition, labels prometheus.Labels){
	VLLM:   vllmExtras,
	SGLang: sglangExtras,
	TGI:    tgiExtras,
	Triton: tritonExtras,
}

func newExposition(d Dialect, model string, ttftBuckets []float64, reg prometheus.Registerer) (*exposition, error) {
	e, ok := dialect.Lookup(d)
	if !ok {
		return nil, fmt.Errorf("inferencesim: unknown dialect %q", d)
	}
	labels := prometheus.Labels{}
	if len(e.ModelLabels) > 0 {
		labels[e.ModelLabels[0]] = model
	}
	maps.Copy(labels, e.Labels)
	x := signalFamilies(e, labels, ttftBuckets)
	if add := extras[d]; add != nil {
		add(x, labels)
	}
	for _, c := range x.collectors() {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("inferencesim: register %s metrics: %w", d, err)
		}
	}
	return x, nil
}

// signalFamilies are the engine's signals under the current name of each
// (a deprecated name a server still exports is an extra), with its help,
// its default buckets (ttftBuckets, when set, for TTFT) and in its unit.
func signalFamilies(e *dialect.Engine, labels prometheus.Labels, ttftBuckets []float64) *exposition {
	x := &exposition{}
	gaugeOf := func(s dialect.Signal) prometheus.Gauge {
		r, ok := e.Reads[s]
		if !ok {
			return nil
		}
		return gauge(r.Families[0], r.Help, labels)
	}
	// histogramOf also returns the factor from seconds to the family's
	// unit: the inverse of the table's, exactly 1000 for milliseconds.
	histogramOf := func(s dialect.Signal, override []float64) (prometheus.Histogram, float64) {
		r, ok := e.Reads[s]
		if !ok {
			return nil, 0
		}
		return histogram(r.Families[0], r.Help, labels, orDefault(override, r.Buckets)), 1 / r.Scale
	}
	x.waiting, x.running, x.kvUsage = gaugeOf(dialect.Queue), gaugeOf(dialect.Running), gaugeOf(dialect.KVCache)
	if x.kvUsage != nil {
		x.kvScale = dialect.Fraction / e.Reads[dialect.KVCache].Scale
	}
	x.ttft, x.ttftScale = histogramOf(dialect.TTFT, ttftBuckets)
	x.prefill, x.prefillScale = histogramOf(dialect.Prefill, nil)
	x.itl, x.itlScale = histogramOf(dialect.ITL, nil)
	x.itlPerRequest = e.Reads[dialect.ITL].PerRequestMean
	return x
}

func vllmExtras(x *exposition, labels prometheus.Labels) {
	success := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: labels,
	}, []string{"finished_reason"})
	// vLLM creates one series per finish reason up front; simulated
	// requests always end on a stop token.
	success.WithLabelValues("length")
	success.WithLabelValues("abort")
	x.success = success.WithLabelValues("stop")
	x.successVec = success
	x.aborted = success.WithLabelValues("abort")
	x.promptTokens = counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", labels)
	x.genTokens = counter("vllm:generation_tokens_total", "Number of generation tokens processed.", labels)
	x.preemptions = counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", labels)
	x.requests = newVLLMRequestStats(labels)
}

func sglangExtras(x *exposition, labels prometheus.Labels) {
	x.success = counter("sglang:num_requests_total", "Number of requests processed.", labels)
	x.promptTokens = counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", labels)
	x.genTokens = counter("sglang:generation_tokens_total", "Number of generation tokens processed.", labels)
}

// tgiExtras: TGI reports how long a request queued, not when its first
// token left (so it has no TTFT).
func tgiExtras(x *exposition, labels prometheus.Labels) {
	x.queueTime = histogram("tgi_request_queue_duration", "Time spent in the queue per request, in seconds.", labels, tgiDurationBuckets)
	x.success = counter("tgi_request_success", "Number of successful requests.", labels)
}

func tritonExtras(x *exposition, labels prometheus.Labels) {
	x.success = counter("nv_inference_request_success",
		"Number of successful inference requests, all batch sizes", labels)
	x.inferences = counter("nv_inference_count",
		"Number of inferences performed (does not include cached requests)", labels)
}

func (x *exposition) collectors() []prometheus.Collector {
	var success prometheus.Collector = x.success
	if x.successVec != nil {
		success = x.successVec
	}
	var out []prometheus.Collector
	for _, c := range []prometheus.Collector{x.waiting, x.running, x.kvUsage, x.ttft, x.prefill, x.queueTime, x.itl,
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
	if x.prefill != nil {
		x.prefill.Observe((c.FirstToken - c.Queued).Seconds() * x.prefillScale)
	}
	if x.itl != nil && x.itlPerRequest && c.GeneratedTokens > 1 {
		// TGI: the request's decode time over its generated tokens.
		x.itl.Observe((c.Total - c.FirstToken).Seconds() / float64(c.GeneratedTokens-1) * x.itlScale)
	}
}

func (x *exposition) observeToken(gap time.Duration) {
	if x.requests != nil {
		x.requests.token(gap)
	}
	if x.itl != nil && !x.itlPerRequest {
		x.itl.Observe(gap.Seconds() * x.itlScale)
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
	set(x.kvUsage, cur.KVCacheUsage*x.kvScale)
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
