// Package inference recognises the metrics of LLM inference servers (vLLM,
// SGLang, TGI, Triton) and maps each dialect onto one common set of signals.
package inference

import "github.com/gpuscale/gpuscale/pkg/histogram"

// Dialect names an inference server's metric vocabulary.
type Dialect string

// Known dialects.
const (
	VLLM   Dialect = "vllm"
	SGLang Dialect = "sglang"
	TGI    Dialect = "tgi"
	Triton Dialect = "triton"
)

// Signals are what one scrape of one inference server says, in common units.
// A nil pointer means the server does not expose that signal; it is never
// reported as zero.
type Signals struct {
	Dialect Dialect
	// Model is the served model's name (vLLM's model_name label, Triton's
	// model label, ...), empty when the server does not say.
	Model string
	// QueueDepth is the number of requests waiting to be scheduled.
	QueueDepth *float64
	// Running is the number of requests being processed.
	Running *float64
	// KVCacheUtilization is the KV-cache usage in percent (0-100).
	KVCacheUtilization *float64
	// TTFT is the cumulative time-to-first-token histogram in seconds, nil
	// when the server has none (TGI).
	TTFT *histogram.Histogram
	// Warnings lists series that were ignored (NaN or negative gauges,
	// malformed histograms) and other oddities of the scrape. A signal
	// whose series were all ignored is nil.
	Warnings []string
}
