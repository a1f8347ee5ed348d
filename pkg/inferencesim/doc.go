// Package inferencesim simulates LLM inference servers (vLLM, SGLang, TGI,
// Triton) whose metrics respond to load as a real server's do, so that
// autoscaling decisions taken on them have consequences in demos and
// end-to-end tests on machines without GPUs.
//
// # Performance model
//
// An Engine is one replica running a vLLM-style continuous-batching
// scheduler, stepped in simulated time:
//
//   - Arriving requests join a first-come-first-served waiting queue.
//   - At the start of each step the scheduler first makes KV room for the
//     step's tokens, preempting the newest running request back to the head
//     of the queue while the cache would overflow (vLLM's recompute
//     preemption; the request later prefills its context and the tokens it
//     had generated again).
//   - A step with b running sequences lasts
//     DecodeBaseStep + b*DecodePerSeqStep and can prefill up to
//     PrefillTokensPerSec times the step time of the batch before admission,
//     in chunks handed out in admission order.
//   - Waiting requests are admitted from the head of the queue while that
//     prefill budget lasts, a batch slot is free (MaxBatch, vLLM's
//     max_num_seqs) and the KV cache can hold the request's prompt. A
//     request that would get no prefill work stays in the queue, so the
//     queue grows once prefill throughput is exhausted.
//   - A request emits its first token at the end of the step that completes
//     its prefill; time to first token is that instant minus its arrival.
//     Every later step gives it one more token until it has generated
//     GeneratedTokens, when it leaves and frees its KV cache. A running
//     request occupies its prompt plus the tokens it has generated.
//
// Prefill and decode overlap within a step: decoding sequences do not slow
// prefill and vice versa. Real chunked prefill lengthens the step it rides
// in; the simplification keeps both throughputs fixed figures of a profile.
//
// DefaultProfile is Llama-3.1-8B-Instruct in bf16 on one H100 80GB SXM; it
// sustains about 15.8 requests/s of the default request (1000 prompt, 130
// generated tokens). docs/inferencesim.md derives each figure and cites its
// source.
//
// The busy fraction an engine reports is the share of time its batch is
// non-empty, as DCGM's GPU utilization is the share of time a kernel runs:
// it reaches 1 long before the queue grows, which is why utilization is a
// poor autoscaling signal for LLM servers and queue depth or TTFT good ones.
//
// # Load
//
// A Load draws Poisson arrivals at a rate that can change at run time, with
// sizes from a Sizes distribution and a seeded generator, so the same seed
// and the same calls give the same run. Trace replays submit their own
// requests with Engine.SubmitAt.
//
// # Servers
//
// A Server wraps an Engine and a Load behind an http.Handler: /metrics in a
// dialect's names, labels, units and bucket layouts on a private registry,
// /healthz, and a JSON API to change the load and submit requests. A
// background loop (Run) keeps the simulation in step with its clock; every
// scrape first advances it to now, so gauges show the engine at scrape time.
package inferencesim
