// Package capacity estimates how much of an inference workload's serving
// capacity the demand expected over its start-up horizon will use: the
// signal inference_capacity_utilization. Demand and capacity come from what
// the servers report (requests running and waiting, KV-cache use); the
// horizon from the workload's own pod start-up times; the forecast from
// Holt's linear trend method. Nothing here knows about HTTP or the metrics
// API: the provider feeds it pods and values and serves what it returns.
//
// The model, with every choice and its reason, is in docs/autoscaling.md
// ("The capacity signal").
package capacity
