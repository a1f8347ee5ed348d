// Package inference recognises the metrics of LLM inference servers (vLLM,
// SGLang, TGI, Triton) and maps each dialect onto one common set of signals,
// and those of the routers in front of them (the Gateway API inference
// extension's endpoint picker, NVIDIA Dynamo's frontend) onto the requests
// they hold per model (router.go).
package inference

import (
	"errors"

	"github.com/gpuscale/gpuscale/pkg/signal/dialect"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// Bounds on the model names the adapter keeps of a scrape. A server's or
// router's names are kept for as long as the pod lives, and every
// per-scrape limit lets a pod name thousands of kilobyte names: kept
// whole, a few dozen pods held hundreds of MiB. Real names are a model
// repository's id (Hugging Face's are at most 96 bytes a part) or a served
// name; one server rarely serves more than a few.
const (
	// MaxModelName bounds one model name. A series naming a longer one
	// is rejected (ErrModelName), and with it its signal or, for a
	// router, that model's count.
	MaxModelName = 256
	// MaxServerModelNames bounds the names of one inference server's
	// scrape, joined: past it Signals.Model is empty (its values are
	// kept, but served per model under no name) and the names are
	// rejected.
	MaxServerModelNames = 1024
)

// ErrModelName is wrapped by the error of a Rejection for model names
// past MaxModelName or MaxServerModelNames.
var ErrModelName = errors.New("model name too long")

// Dialect names an inference server's metric vocabulary: an engine's of
// the dialect table (pkg/signal/dialect), or a router's (router.go).
type Dialect = dialect.Name

// The engines' dialects.
const (
	VLLM   = dialect.VLLM
	SGLang = dialect.SGLang
	TGI    = dialect.TGI
	Triton = dialect.Triton
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
	// Prefill is the cumulative histogram of each finished request's time
	// in prefill, in seconds, nil when the server has none (only vLLM
	// exports it).
	Prefill *histogram.Histogram
	// ITL is the cumulative inter-token latency histogram in seconds
	// (vLLM's and SGLang's gaps between output tokens; TGI's mean time
	// per token of each request), nil when the server has none (Triton).
	ITL *histogram.Histogram
	// Warnings lists oddities of the scrape that cost no value: other
	// dialects present, a TTFT family of the wrong type.
	Warnings []string
	// Rejected lists the series, and sums of series, that were not read.
	// A signal any of them belongs to is nil.
	Rejected []Rejection
}

// Rejection is a series, or a sum of series, that Detect did not read.
type Rejection struct {
	// Series is the series as name{label="value",...}, or the family a
	// sum out of range was taken over.
	Series string
	// Err says why. It wraps signal.ErrNotFinite or signal.ErrOutOfRange for
	// a value, histogram.ErrInvalid for a histogram, ErrNotGauge for a
	// series of the wrong type.
	Err error
}

func (r Rejection) Error() string { return r.Series + ": " + r.Err.Error() }
func (r Rejection) Unwrap() error { return r.Err }
