// Package dialect is the vocabulary of the inference servers' metric
// dialects: one entry per engine (vLLM, SGLang, TGI, Triton) saying which
// metric family carries each signal, of which type, in which unit, and
// which label names the model.
//
// Three packages read the table, and nothing else says what an engine
// exports:
//
//   - pkg/adapter/inference detects a pod's dialect by its prefix and parses its
//     scrape into signals (the embedded source);
//   - pkg/adapter/promsource writes its default PromQL from it (--source=prometheus);
//   - pkg/inferencesim exposes it, so that the demo, the end-to-end tests
//     and the bench scrape what a real server would serve.
//
// A new dialect is one Engine in Engines; a test (agree_test.go) walks the
// table and fails, naming the dialect and signal, where the simulator's
// exposition is not detected and parsed back as what it set, or where a
// signal has no PromQL default selecting exactly its families.
//
// The package sits beneath all three and imports nothing of the module:
// pkg/adapter/inference and pkg/adapter/promsource ship in the adapter, pkg/inferencesim
// does not (test/deps), and the bench imports the simulator without the
// adapter, so the table can be in none of them. It holds facts about the
// engines only; what a consumer makes of them (PromQL, parsing, simulated
// physics) stays with the consumer.
package dialect

import (
	"strconv"
	"strings"
)

// Name names an inference server's metric vocabulary.
type Name string

// The engines' names.
const (
	VLLM   Name = "vllm"
	SGLang Name = "sglang"
	TGI    Name = "tgi"
	Triton Name = "triton"
)

// Signal is what an engine's family says, in the adapter's common unit.
type Signal int

// The signals an engine may export. Queue and Running are counts of
// requests and KVCache a percentage (gauges); the others are cumulative
// histograms in seconds.
const (
	// Queue is the requests waiting to be scheduled.
	Queue Signal = iota
	// Running is the requests being processed.
	Running
	// KVCache is the KV-cache usage in percent (0-100).
	KVCache
	// TTFT is each request's time to its first token.
	TTFT
	// Prefill is each finished request's time in prefill (first
	// scheduled to first token).
	Prefill
	// ITL is the inter-token latency: the gaps between output tokens
	// (or, where Reading.PerRequestMean, each request's mean gap).
	ITL
	// NumSignals is how many there are: Signals() are 0 to NumSignals-1.
	NumSignals
)

// Signals lists every signal, in the order above.
func Signals() []Signal {
	out := make([]Signal, NumSignals)
	for i := range out {
		out[i] = Signal(i)
	}
	return out
}

var signalNames = [NumSignals]string{"queue", "running", "kv-cache", "ttft", "prefill", "itl"}

func (s Signal) String() string {
	if s < 0 || s >= NumSignals {
		return "signal(" + strconv.Itoa(int(s)) + ")"
	}
	return signalNames[s]
}

// Histogram reports whether the signal's families are histograms; the
// others are gauges.
func (s Signal) Histogram() bool { return s >= TTFT }

// Reading is how one engine exports one signal.
type Reading struct {
	// Families are the family's names, the current one first, then the
	// deprecated ones: a server exporting a renamed family beside its
	// old name exports the same observations twice, so the first present
	// is read and only that one. Histogram families are named without
	// _bucket.
	Families []string
	// Scale converts the family's values (gauges) or bounds and sums
	// (histograms) to the signal's unit: 100 for a 0-1 fraction of the
	// KV cache, 0.001 for milliseconds.
	Scale float64
	// PerRequestMean marks an ITL family with one observation per request,
	// its decode time over its generated tokens (TPOT), rather than one per
	// token gap: its quantiles are over requests.
	PerRequestMean bool
	// Help is the engine's HELP text of Families[0], and Buckets its
	// default bucket bounds in the family's unit: what the simulator
	// serves.
	Help    string
	Buckets []float64
}

// Engine is one inference server's dialect.
type Engine struct {
	Name Name
	// Prefix marks the dialect: any family whose name starts with it.
	Prefix string
	// ModelLabels name the model, first present wins; none when the
	// server serves one unnamed model (TGI).
	ModelLabels []string
	// Labels are the constant labels the server puts beside the model's
	// (vLLM's engine index, Triton's model version): the simulator serves
	// them, detection ignores them.
	Labels map[string]string
	// Reads are the signals the server exports; a signal it lacks is
	// absent and is never reported as zero.
	Reads map[Signal]Reading
}

// Has reports whether the engine exports s.
func (e *Engine) Has(s Signal) bool { _, ok := e.Reads[s]; return ok }

// Families returns the names of s's families, none when the engine lacks s.
func (e *Engine) Families(s Signal) []string { return e.Reads[s].Families }

// ModelLabel is the label a query matches the model on: the first of
// ModelLabels or, for a server that names no model, model_name, which its
// series lack, so that a query for one model leaves it out.
func (e *Engine) ModelLabel() string {
	if len(e.ModelLabels) == 0 {
		return "model_name"
	}
	return e.ModelLabels[0]
}

// Lookup returns the engine named n.
func Lookup(n Name) (*Engine, bool) {
	for i := range Engines {
		if Engines[i].Name == n {
			return &Engines[i], true
		}
	}
	return nil, false
}

// Names lists the engines' names in table order.
func Names() []Name {
	out := make([]Name, len(Engines))
	for i, e := range Engines {
		out[i] = e.Name
	}
	return out
}

// Enumerate lists f of every engine, in table order, as "a, b, c or d",
// for messages that name what is known.
func Enumerate(f func(*Engine) string) string {
	items := make([]string, len(Engines))
	for i := range Engines {
		items[i] = f(&Engines[i])
	}
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

// exponential is n bounds from start, each factor times the one before
// (client_golang's ExponentialBuckets, which this package does not import).
func exponential(start, factor float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = start
		start *= factor
	}
	return out
}
