package inferencesim

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// Profile is the performance of one replica: one model served by one engine
// on one GPU. docs/inferencesim.md gives the source of every default figure.
type Profile struct {
	// Name describes the model and hardware, for logs.
	Name string
	// PrefillTokensPerSec is how many prompt tokens the replica processes
	// per second. A step of duration d can prefill up to
	// PrefillTokensPerSec*d prompt tokens.
	PrefillTokensPerSec float64
	// DecodeBaseStep and DecodePerSeqStep give the duration of one engine
	// step with b running sequences: DecodeBaseStep + b*DecodePerSeqStep.
	// Every sequence that finished its prefill gets one token per step.
	DecodeBaseStep   time.Duration
	DecodePerSeqStep time.Duration
	// MaxBatch is the most sequences running at once (vLLM's max_num_seqs).
	MaxBatch int
	// KVCacheTokens is the KV-cache capacity in tokens. A running request
	// occupies its context plus the tokens it has generated so far.
	KVCacheTokens int
}

// DefaultProfile is Llama-3.1-8B-Instruct in bf16 on one H100 80GB SXM under
// vLLM with gpu_memory_utilization=0.9. One replica sustains about 15.8
// requests/s of the default 1000/130-token request; above that its queue
// grows without bound.
func DefaultProfile() Profile {
	return Profile{
		Name: "meta-llama/Llama-3.1-8B-Instruct bf16 on 1x H100 80GB SXM",
		// 16.1 GFLOP per token (2 x 8.03e9 params) against 989 dense
		// bf16 TFLOPS is 61k tokens/s at full utilization; chunked prefill
		// of an 8B model reaches roughly a quarter of that.
		PrefillTokensPerSec: 16000,
		// A decode step streams all 16 GB of weights from HBM3 at
		// 3.35 TB/s (4.8 ms at the roofline, about 6.2 ms at the 77% of
		// it that vLLM reaches) plus per-step scheduler overhead.
		DecodeBaseStep: 7 * time.Millisecond,
		// Each sequence adds its KV reads (128 KiB per context token) and
		// its share of the GEMMs.
		DecodePerSeqStep: 80 * time.Microsecond,
		MaxBatch:         256,
		// (0.9 x 79.6 GiB - 15.0 GiB weights - ~2 GiB activations) /
		// 128 KiB per token = ~430k tokens.
		KVCacheTokens: 430_000,
	}
}

// L4Profile is the same model on one NVIDIA L4 24GB, the GPU many clouds
// rent for small-model inference. The trace replay uses it: on an H100 the
// recorded hour needs one or two replicas, on L4s it needs several, so a
// policy's timing decides its latency. It sustains about 2 requests/s of
// the default request, bounded by its KV cache: 32k tokens hold about 28
// such requests, each decoding for about 11 s.
func L4Profile() Profile {
	return Profile{
		Name: "meta-llama/Llama-3.1-8B-Instruct bf16 on 1x L4 24GB",
		// Half of 121 dense bf16 TFLOPS: on a slow GPU, compute-bound
		// prefill hides the per-step overheads that hold the H100
		// estimate to 26% of its peak.
		PrefillTokensPerSec: 4000,
		// 16.06 GB of weights at 77% of 300 GB/s, the share of the
		// bandwidth roofline vLLM reaches on this model.
		DecodeBaseStep: 70 * time.Millisecond,
		// A ~1.3k-token context is 170 MB of KV reads per step.
		DecodePerSeqStep: 750 * time.Microsecond,
		MaxBatch:         256,
		// (0.9 x 22.5 GiB - 15.0 GiB weights - ~1.3 GiB activations) /
		// 128 KiB per token = ~32k tokens.
		KVCacheTokens: 32_000,
	}
}

// Profiles are the built-in profiles by the name a simulated pod's
// SIM_PROFILE variable gives.
var Profiles = map[string]func() Profile{
	"h100-llama-3.1-8b": DefaultProfile,
	"l4-llama-3.1-8b":   L4Profile,
}

// ProfileByName returns a built-in profile, or an error listing the names.
func ProfileByName(name string) (Profile, error) {
	if f, ok := Profiles[name]; ok {
		return f(), nil
	}
	names := slices.Sorted(maps.Keys(Profiles))
	return Profile{}, fmt.Errorf("inferencesim: unknown profile %q (known: %s)", name, strings.Join(names, ", "))
}

// Validate reports every invalid figure at once.
func (p Profile) Validate() error {
	var errs []error
	if !(p.PrefillTokensPerSec > 0) || math.IsInf(p.PrefillTokensPerSec, 0) {
		errs = append(errs, fmt.Errorf("prefill throughput must be positive and finite, got %v tokens/s", p.PrefillTokensPerSec))
	}
	if p.DecodeBaseStep <= 0 {
		errs = append(errs, fmt.Errorf("decode base step must be positive, got %v", p.DecodeBaseStep))
	}
	if p.DecodePerSeqStep < 0 {
		errs = append(errs, fmt.Errorf("decode per-sequence step must not be negative, got %v", p.DecodePerSeqStep))
	}
	if p.MaxBatch < 1 {
		errs = append(errs, fmt.Errorf("max batch must be at least 1, got %d", p.MaxBatch))
	}
	if p.KVCacheTokens < 2 {
		errs = append(errs, fmt.Errorf("KV cache must hold at least 2 tokens, got %d", p.KVCacheTokens))
	}
	if len(errs) > 0 {
		return fmt.Errorf("inferencesim: invalid profile: %w", errors.Join(errs...))
	}
	return nil
}

// stepTime is the duration of one engine step with b running sequences.
func (p Profile) stepTime(b int) time.Duration {
	return p.DecodeBaseStep + time.Duration(b)*p.DecodePerSeqStep
}

// prefillBudget is how many prompt tokens a step of duration d processes.
// It is at least one so that a profile with a tiny throughput still makes
// progress.
func (p Profile) prefillBudget(d time.Duration) int {
	return max(1, int(p.PrefillTokensPerSec*d.Seconds()))
}
