// Package nvml is the gpu.Backend that reads NVIDIA GPUs through NVML, the
// library the driver ships (libnvidia-ml.so.1). It reports whole GPUs, their
// MIG instances and the XID errors the driver raises.
//
// Every NVML call goes through go-nvml's Interface and Device handles, so
// the package is tested with go-nvml's mock package and needs neither a GPU
// nor a driver to build or test.
//
// The package builds everywhere: without cgo, or off Linux, Open says that
// this build cannot read GPUs, so its callers need no build tags of their
// own and are vetted in the module's one build configuration (cgo off).
package nvml

import "log/slog"

// Options configures New and Open.
type Options struct {
	// Logger receives the backend's logs; slog.Default() when nil.
	Logger *slog.Logger
	// XIDEvents starts a goroutine that watches XID critical error events,
	// reported as gpu.FieldLastXID and gpu.Reading.XIDCounts.
	XIDEvents bool
	// Processes reads every whole GPU's compute processes with their
	// memory and utilization share (gpu.Reading.Processes).
	Processes bool
	// Profiling reads the GPM profiling metrics of GPUs that support them
	// (Hopper and later), for the GPU and each MIG instance.
	Profiling bool
}
