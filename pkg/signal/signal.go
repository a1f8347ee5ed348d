// Package signal is the vocabulary every source of the adapter's metrics
// shares: the scalar signals and latency histograms it serves, where each
// comes from (Source), the physical range of each (Range, the Max* bounds)
// and the checks a scraped value or histogram must pass to be served
// (Check, CheckTTFT). The parsers (pkg/adapter/inference, pkg/adapter/ingest), the store
// that keeps samples (pkg/adapter/store) and the metrics API (pkg/provider) all
// speak it, and it imports none of them: the provider's contract is
// signals, not the storage one of its sources keeps them in.
package signal

import (
	"errors"
	"fmt"
	"math"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// Signal is one scalar the adapter serves.
type Signal uint8

// The scalar signals. The latency histograms (Hist) are kept beside them.
const (
	GPUUtilization       Signal = iota // percent, mean over the object's GPUs
	GPUMemoryUtilization               // percent of framebuffer in use
	GPUMemoryUsedBytes                 // bytes
	GPUPowerWatts                      // watts, sum over the object's GPUs
	QueueDepth                         // requests waiting
	RequestsRunning                    // requests being processed
	KVCacheUtilization                 // percent
	GPUSMActive                        // percent of cycles an SM had a warp, mean over the object's GPUs
	GPUTensorActive                    // percent of cycles the tensor pipes were busy, mean over the object's GPUs
	NumSignals
)

// Physical bounds of what one device or one inference server can report.
// They are what no real hardware or server reaches, not what is typical: a
// real value must never be rejected, and a value past them is a broken or
// hostile target, never a number to serve.
const (
	// MaxDevices is the most GPUs and MIG instances one exporter can
	// attribute to one pod or hold on one node (16 GPUs of 7 MIG
	// instances each are 112).
	MaxDevices = 1024
	// MaxDeviceMemoryBytes is one device's framebuffer: 4 TiB, 14 times
	// the largest GPU's (288 GB).
	MaxDeviceMemoryBytes = 1 << 42
	// MaxDevicePowerWatts is one device's draw: 20 kW, over ten times
	// the 1.4 kW of a B300, the most drawn by any GPU in 2025.
	MaxDevicePowerWatts = 20_000
	// MaxRequests is the most requests one inference server holds,
	// waiting or running: each costs at least kilobytes of host memory,
	// so 2^30 of them are terabytes.
	MaxRequests = 1 << 30
	// MaxTTFTSeconds bounds a time to first token: a week.
	MaxTTFTSeconds = 7 * 24 * 3600
	// MaxTTFTCount bounds a TTFT histogram's cumulative counts: past 2^53
	// a float64 no longer counts single requests, so increases would be
	// wrong. At a million requests a second that is 285 years.
	MaxTTFTCount = 1 << 53
)

// Range is the closed interval of the values a signal can physically take.
type Range struct{ Min, Max float64 }

// Aggregation says how the values of several objects (a workload's pods,
// a LeaderWorkerSet group's members) combine into one.
type Aggregation uint8

// Aggregations. The zero Aggregation is none: a table line without one is
// caught by TestSignalsDeclared.
const (
	// Mean averages the objects: a utilization or a percentage.
	Mean Aggregation = iota + 1
	// Sum adds them up: bytes, watts, requests.
	Sum
)

// String names the aggregation, for errors and tests.
func (a Aggregation) String() string {
	switch a {
	case Mean:
		return "mean"
	case Sum:
		return "sum"
	}
	return fmt.Sprintf("aggregation(%d)", uint8(a))
}

// Unit is what a signal's value counts. The metrics API's quantity format
// follows from it (pkg/provider): bytes in binary SI, the rest in decimal.
type Unit uint8

// Units. The zero Unit is none, caught by TestSignalsDeclared.
const (
	Percent Unit = iota + 1
	Bytes
	Watts
	Requests
	Seconds
	numUnits
)

// String names the unit, for errors and tests.
func (u Unit) String() string {
	switch u {
	case Percent:
		return "percent"
	case Bytes:
		return "bytes"
	case Watts:
		return "watts"
	case Requests:
		return "requests"
	case Seconds:
		return "seconds"
	}
	return fmt.Sprintf("unit(%d)", uint8(u))
}

// declaration is one line of the signal table.
type declaration struct {
	// name names the signal in errors and logs.
	name string
	// served is the metric name the API serves it under, part of
	// gpuscale's API: HPAs name it.
	served string
	source Source
	agg    Aggregation
	unit   Unit
	// rng is the physical range of one pod's or node's value: a sum over
	// up to MaxDevices devices, or over an inference server's engines and
	// models.
	rng Range
	// device is the range of one device's reading, where the signal is a
	// sum over devices; nil: the same as rng.
	device *Range
}

// signals declares every scalar signal but its constant, and is all the
// metrics API's catalog knows of it (pkg/provider derives its entries from
// this table). A new signal is a constant above, a line here, and what
// fills it: for a GPU signal, a Feed on its field's gpu.Specs entry; for an
// inference signal, the dialects' code (pkg/adapter/inference). TestSignalsDeclared
// fails on a line missing, provider's TestEverySignalServed on a signal not
// served, ingest's TestEverySignalFilled on one no scrape fills. The lines
// are positional so that the compiler refuses one that leaves a column out.
var signals = [NumSignals]declaration{
	// name, served metric, source, aggregation, unit, range, one device's range
	GPUUtilization:       {"gpu_utilization", "gpu_utilization", SourceGPU, Mean, Percent, Range{0, 100}, nil},
	GPUMemoryUtilization: {"gpu_memory_utilization", "gpu_memory_utilization", SourceGPU, Mean, Percent, Range{0, 100}, nil},
	GPUMemoryUsedBytes:   {"gpu_memory_used_bytes", "gpu_memory_used_bytes", SourceGPU, Sum, Bytes, Range{0, MaxDevices * MaxDeviceMemoryBytes}, &Range{0, MaxDeviceMemoryBytes}},
	GPUPowerWatts:        {"gpu_power_watts", "gpu_power_watts", SourceGPU, Sum, Watts, Range{0, MaxDevices * MaxDevicePowerWatts}, &Range{0, MaxDevicePowerWatts}},
	QueueDepth:           {"queue_depth", "inference_queue_depth", SourceInference, Sum, Requests, Range{0, MaxRequests}, nil},
	RequestsRunning:      {"requests_running", "inference_requests_running", SourceInference, Sum, Requests, Range{0, MaxRequests}, nil},
	KVCacheUtilization:   {"kv_cache_utilization", "inference_kv_cache_utilization", SourceInference, Mean, Percent, Range{0, 100}, nil},
	GPUSMActive:          {"gpu_sm_active", "gpu_sm_active", SourceGPU, Mean, Percent, Range{0, 100}, nil},
	GPUTensorActive:      {"gpu_tensor_active", "gpu_tensor_active", SourceGPU, Mean, Percent, Range{0, 100}, nil},
}

// String names the signal, for errors and logs.
func (sig Signal) String() string {
	if sig >= NumSignals || signals[sig].name == "" {
		return fmt.Sprintf("signal(%d)", uint8(sig))
	}
	return signals[sig].name
}

// Range returns the physical range of one pod's or node's value of sig.
func (sig Signal) Range() Range {
	if sig >= NumSignals {
		return Range{math.NaN(), math.NaN()}
	}
	return signals[sig].rng
}

// DeviceRange returns the physical range of one device's reading of sig:
// for the signals summed over a pod's or node's devices, a MaxDevices-th of
// its Range; for the others, its Range.
func (sig Signal) DeviceRange() Range {
	if sig < NumSignals && signals[sig].device != nil {
		return *signals[sig].device
	}
	return sig.Range()
}

// Served returns the metric name the API serves sig under; "" for a
// signal outside the table.
func (sig Signal) Served() string {
	if sig >= NumSignals {
		return ""
	}
	return signals[sig].served
}

// Source returns the kind of scrape sig comes from.
func (sig Signal) Source() Source {
	if sig >= NumSignals {
		return NumSources
	}
	return signals[sig].source
}

// Aggregation returns how several objects' values of sig combine.
func (sig Signal) Aggregation() Aggregation {
	if sig >= NumSignals {
		return 0
	}
	return signals[sig].agg
}

// Unit returns what sig's value counts.
func (sig Signal) Unit() Unit {
	if sig >= NumSignals {
		return 0
	}
	return signals[sig].unit
}

var (
	// ErrNotFinite is wrapped by Check's error for NaN and infinities.
	ErrNotFinite = errors.New("not a finite number")
	// ErrOutOfRange is wrapped by Check's error for a finite value outside
	// the physical range.
	ErrOutOfRange = errors.New("outside the physical range")
)

// Check reports whether v is a value sig can physically take: an error
// wrapping ErrNotFinite or ErrOutOfRange if not.
func (sig Signal) Check(v float64) error {
	if err := sig.Range().Check(v); err != nil {
		return fmt.Errorf("%s: %w", sig, err)
	}
	return nil
}

// Check reports whether v lies in r: an error wrapping ErrNotFinite or
// ErrOutOfRange if not.
func (r Range) Check(v float64) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Errorf("%w: %g", ErrNotFinite, v)
	case !(v >= r.Min && v <= r.Max): // NaN bounds reject everything
		return fmt.Errorf("%w: %g not in [%g, %g]", ErrOutOfRange, v, r.Min, r.Max)
	}
	return nil
}

// MaxHistogramBuckets bounds the buckets of a TTFT or prefill-time
// histogram, +Inf included: over twice vLLM's 23 (SGLang's are 18, Triton's
// 5, a Prometheus client's default 11). A window keeps a pod's histograms
// for the TTFT window, and a scrape within every limit could otherwise
// hold 4,096 buckets each, tens of KiB a sample.
const MaxHistogramBuckets = 64

// ErrTooManyBuckets is wrapped by CheckTTFT's error for a histogram of more
// than MaxHistogramBuckets buckets. It is no invalid histogram: the pod's
// other signals stand.
var ErrTooManyBuckets = errors.New("too many histogram buckets")

// CheckTTFT reports whether h can be a TTFT histogram, in seconds, as one
// scrape exposes it: at most MaxHistogramBuckets buckets (ErrTooManyBuckets),
// histogram.Validate, and besides no negative bound (a
// negative duration would yield a negative quantile), cumulative counts
// that never decrease from one bucket to the next nor exceed MaxTTFTCount,
// and a finite, non-negative Sum. Its errors but ErrTooManyBuckets wrap
// histogram.ErrInvalid.
// Quantiles of one are still checked against MaxTTFTSeconds where served:
// a bound is no value, and layouts differ.
func CheckTTFT(h *histogram.Histogram) error {
	if h != nil && len(h.Bounds) > MaxHistogramBuckets {
		return fmt.Errorf("%w: %d, the most is %d", ErrTooManyBuckets, len(h.Bounds), MaxHistogramBuckets)
	}
	if err := h.Validate(); err != nil {
		return err
	}
	if b := h.Bounds[0]; b < 0 {
		return fmt.Errorf("%w: negative bound le=%g", histogram.ErrInvalid, b)
	}
	prev := 0.0
	for i, c := range h.Counts {
		if c < prev {
			return fmt.Errorf("%w: cumulative count %g at le=%g below %g of the bucket before", histogram.ErrInvalid, c, h.Bounds[i], prev)
		}
		prev = c
	}
	if prev > MaxTTFTCount || h.Count > MaxTTFTCount {
		return fmt.Errorf("%w: count %g above %g", histogram.ErrInvalid, max(prev, h.Count), float64(MaxTTFTCount))
	}
	if math.IsNaN(h.Sum) || math.IsInf(h.Sum, 0) || h.Sum < 0 {
		return fmt.Errorf("%w: sum %g", histogram.ErrInvalid, h.Sum)
	}
	return nil
}

// Hist names a latency histogram a sample carries beside its scalars, whose
// increase over a window the store keeps to answer quantiles as PromQL's
// histogram_quantile over rate() would.
type Hist uint8

// The latency histograms.
const (
	HistTTFT Hist = iota // time to first token
	HistITL              // inter-token latency (time per output token)
	NumHists
)

// hists declares every latency histogram but its constant: its name, the
// served name its quantiles' metric names start with, and the percentiles
// served. A histogram comes from inference servers (SourceInference), in
// seconds, and a quantile of it is at most MaxTTFTSeconds. The metrics
// API's quantile entries are derived from this table, as its scalar ones
// are from signals'.
var hists = [NumHists]struct {
	name        string
	served      string
	percentiles []int
}{
	HistTTFT: {"ttft", "inference_ttft_seconds", []int{50, 90, 99}},
	HistITL:  {"itl", "inference_itl_seconds", []int{50, 90, 99}},
}

// String names the histogram, for errors and logs.
func (h Hist) String() string {
	if h >= NumHists || hists[h].name == "" {
		return fmt.Sprintf("hist(%d)", uint8(h))
	}
	return hists[h].name
}

// Quantile is one served quantile of a latency histogram.
type Quantile struct {
	// Served is the metric name the API serves it under, the
	// histogram's served name and _p and the percentile:
	// inference_ttft_seconds_p90.
	Served string
	// Q is the quantile, in (0, 1).
	Q float64
}

// Quantiles returns the served quantiles of h, lowest first.
func (h Hist) Quantiles() []Quantile {
	if h >= NumHists {
		return nil
	}
	d := hists[h]
	out := make([]Quantile, len(d.percentiles))
	for i, p := range d.percentiles {
		out[i] = Quantile{Served: fmt.Sprintf("%s_p%d", d.served, p), Q: float64(p) / 100}
	}
	return out
}

// Source returns the kind of scrape h comes from: inference servers.
func (Hist) Source() Source { return SourceInference }

// Unit returns what h's bounds and quantiles count: seconds.
func (Hist) Unit() Unit { return Seconds }

// Range returns the range of a quantile of h: up to MaxTTFTSeconds.
func (Hist) Range() Range { return Range{0, MaxTTFTSeconds} }

// Source names the kind of scrape a sample came from. The store keeps a
// pod's samples in one window per source, so an exporter that goes away
// takes only the GPU signals with it.
type Source uint8

// Sources.
const (
	SourceGPU Source = iota
	SourceInference
	NumSources
)
