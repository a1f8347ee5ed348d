// Package autoscalebench replays a recorded LLM trace through a cluster of
// simulated inference servers under several autoscaling policies at once,
// and reports what each policy did to latency and to the GPU bill.
//
// Every time in a Recording is trace time: the offset from the start of
// the replayed slice of the trace, however much the replay compressed it.
package autoscalebench

import "time"

// Policy names, in the order reports list them.
const (
	PolicyGPUUtilization = "gpu-utilization"
	PolicyQueueDepth     = "queue-depth"
	PolicyTTFT           = "ttft-p90"
	PolicyStatic         = "static-peak"
	// PolicyQueueDepthRecommended is the queue-depth HPA with the
	// behavior `adapter recommend` derives from the model's load time,
	// instead of the controller's defaults: what gpuscale's scale-down
	// tuning changes.
	PolicyQueueDepthRecommended = "queue-depth-recommended"
	// PolicyRunningRequests scales on the requests each replica holds in
	// its batch: a signal proportional to load (Little's law), where the
	// queue is zero until a replica is already full.
	PolicyRunningRequests = "running-requests"
	// PolicyCapacity scales on inference_capacity_utilization at value
	// 1, with the behavior `adapter recommend` gives: forecast demand
	// over the start-up horizon against measured capacity (pkg/signal/capacity).
	PolicyCapacity = "capacity"
	// PolicyRecommended names, in both the bench and the offline replay,
	// the README's first example HPA: Recommended is the policy it is.
	PolicyRecommended = "recommended"
	// PolicyLLMD is the reference: llm-d's SLO-aware control law on TTFT
	// p90 over the SLO (llmd.go), driving the Deployment's scale itself.
	PolicyLLMD = "llm-d-slo"
)

// RequestOutcome is what happened to one replayed request.
type RequestOutcome struct {
	// Arrival is when the request arrived, in trace time.
	Arrival time.Duration
	// TTFT is its time to first token. Meaningless unless Served.
	TTFT time.Duration
	// Served is false for a request that never produced a first token: no
	// replica was ready to take it, its replica was deleted before it was
	// served, or the replay ended first. Unserved requests count as
	// missing the SLO and as +Inf in the TTFT quantiles.
	Served bool
	// Rejected is a request no replica can ever serve: its prompt and
	// output exceed a replica's KV cache, and the server refused it at
	// once, as vLLM answers such a request with HTTP 400. It is neither
	// served nor unserved: no number of replicas changes it, so it counts
	// in no quantile and no minute, only apart.
	Rejected bool
	// Aborted is a request whose replica was deleted and killed before
	// its last token: if Served, a stream cut mid-way; if not, a request
	// that also counts as unserved.
	Aborted bool `json:",omitempty"`
}

// Sample is the state of one policy's workload at one instant.
type Sample struct {
	At time.Duration // trace time
	// Desired is the Deployment's spec.replicas (what the HPA asked for).
	Desired int
	// Ready is the number of Ready pods: those that take traffic.
	Ready int
	// Pods is the number of pods that exist and are not terminal, ready or
	// not.
	Pods int
	// GPUs is what those pods request, across every pod of a replica, plus
	// what deleted replicas hold while they drain: its integral over time
	// is the GPU bill. Zero in recordings made before it was kept, whose
	// pods held one GPU each.
	GPUs int `json:",omitempty"`
}

// PolicyRecording is everything one policy's run produced.
type PolicyRecording struct {
	Policy string
	// Describe says in one line what the policy is (the HPA's metric and
	// target, or the static replica count).
	Describe string
	Requests []RequestOutcome // in arrival order
	Samples  []Sample         // in time order, about every SampleInterval
	// Capacity is the adapter's capacity estimate of the capacity
	// policy's workload, every HPA sync; empty for other policies.
	Capacity []CapacityParts `json:",omitempty"`
}

// Recording is one replay of a trace slice under several policies.
type Recording struct {
	// Trace is the file replayed; Start and Duration the slice of it.
	Trace           string
	Start, Duration time.Duration
	// Speedup is how many times faster than real time the trace ran.
	Speedup float64
	// SLO is the TTFT p90 a trace minute must stay under to count as met.
	SLO time.Duration
	// StaticReplicas is the trace's peak need: the fewest always-ready
	// replicas that meet the SLO in every minute of the slice (see
	// StaticNeed). The static policy runs this many.
	StaticReplicas int
	// GPUsPerReplica is the GPUs one replica holds across its pods, which
	// the static bill multiplies StaticReplicas by; 1 when zero.
	GPUsPerReplica int `json:",omitempty"`
	// StaticMinutesMet is how many minutes the static policy meets the SLO
	// in offline: no number of replicas meets more, since some minutes'
	// prompts take longer than the SLO to prefill alone.
	StaticMinutesMet int
	// Setup says in a few words what ran: the replica profile, model load
	// time, starting size and HPA bounds. Reports print it as given.
	Setup string
	// RequestRate is the trace's arrivals per RateBucket, for plots.
	RateBucket  time.Duration
	RequestRate []float64 // requests/s in each bucket from Start
	Policies    []PolicyRecording
}
