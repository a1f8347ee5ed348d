// Package signal is the vocabulary every source of the adapter's metrics
// shares: the scalar signals and latency histograms it serves, where each
// comes from (Source), the physical range of each (Range, the Max* bounds)
// and the checks a scraped value or histogram must pass to be served
// (Check, CheckTTFT). The parsers (pkg/inference, pkg/ingest), the store
// that keeps samples (pkg/store) and the metrics API (pkg/provider) all
// speak it, and it imports none of them: the provider's contract is
// signals, not the storage one of its sources keeps them in.
package signal

import (
	"errors"
	"fmt"
	"math"

	"github.com/gpuscale/gpuscale/pkg/histogram"
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

// signals declares every scalar signal but its constant: its name, and the
// physical range of one pod's or node's value (a sum over up to MaxDevices
// devices, or over an inference server's engines and models) and, where it
// is a sum over devices, of one device's reading. A new signal is a
// constant above and a line here; TestSignalsDeclared fails without both.
var signals = [NumSignals]struct {
	name   string
	rng    Range
	device *Range // nil: the same as rng
}{
	GPUUtilization:       {"gpu_utilization", Range{0, 100}, nil},
	GPUMemoryUtilization: {"gpu_memory_utilization", Range{0, 100}, nil},
	GPUMemoryUsedBytes:   {"gpu_memory_used_bytes", Range{0, MaxDevices * MaxDeviceMemoryBytes}, &Range{0, MaxDeviceMemoryBytes}},
	GPUPowerWatts:        {"gpu_power_watts", Range{0, MaxDevices * MaxDevicePowerWatts}, &Range{0, MaxDevicePowerWatts}},
	QueueDepth:           {"queue_depth", Range{0, MaxRequests}, nil},
	RequestsRunning:      {"requests_running", Range{0, MaxRequests}, nil},
	KVCacheUtilization:   {"kv_cache_utilization", Range{0, 100}, nil},
	GPUSMActive:          {"gpu_sm_active", Range{0, 100}, nil},
	GPUTensorActive:      {"gpu_tensor_active", Range{0, 100}, nil},
}

// String names the signal, for errors and logs.
func (sig Signal) String() string {
	if sig >= NumSignals {
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

// String names the histogram, for errors and logs.
func (h Hist) String() string {
	switch h {
	case HistTTFT:
		return "ttft"
	case HistITL:
		return "itl"
	}
	return fmt.Sprintf("hist(%d)", uint8(h))
}

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
