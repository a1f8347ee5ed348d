// Package gpu defines what a GPU backend reports: the identity of every
// device (a whole GPU or a MIG instance) and one reading of its fields.
// Backends (NVML, simulated) fill these types; the exporter's collector turns
// them into metrics. Nothing here talks to hardware.
//
// It also holds the one table of GPU fields (Specs, fields.go): for each
// field, what the backends read into it, the dcgm-exporter series it fills
// in each naming schema, and the adapter signal it feeds. The table lives
// here, not in pkg/gpu/dcgm, because its key is the Field every backend writes
// and every Reading carries; pkg/gpu/dcgm stays the naming mechanics (schemas,
// units, labels) that do not depend on which fields exist. pkg/gpu imports
// only it and the signal vocabulary (pkg/signal, which a Feed names), so
// both the exporter's side (backends, pkg/metrics) and the adapter's
// (pkg/adapter/ingest, pkg/adapter/promsource) read the table without
// importing each other or anything that talks to hardware.
package gpu

import (
	"context"
)

// MIG describes a MIG instance. A Device with a nil MIG is a whole GPU.
type MIG struct {
	// UUID of the MIG device ("MIG-..."), as the device plugin and the
	// kubelet's pod-resources API name it.
	UUID              string `json:"uuid"`
	GPUInstanceID     int    `json:"gpuInstanceId"`
	ComputeInstanceID int    `json:"computeInstanceId"`
	// Profile is the GPU instance profile, for example "1g.10gb".
	Profile string `json:"profile"`
}

// Device identifies one exported device. For a MIG instance the GPU-level
// fields (Index, UUID, PCIBusID, ModelName, Minor) are the parent GPU's, as in
// dcgm-exporter, so that dashboards group instances under their GPU.
type Device struct {
	Index     int    // NVML index of the (parent) GPU: the "gpu" label
	Minor     int    // /dev/nvidiaN minor number: the "device" label
	UUID      string // parent GPU UUID ("GPU-...")
	ModelName string
	PCIBusID  string
	MIG       *MIG
}

// ID is the identifier the kubelet's pod-resources API uses for this
// device: the MIG UUID for a MIG instance, the GPU UUID otherwise.
func (d Device) ID() string {
	if d.MIG != nil {
		return d.MIG.UUID
	}
	return d.UUID
}

// XID codes are a closed set: NVIDIA's catalogue numbers them from 1 to
// about 160. Each code seen becomes one gpuscale_gpu_xid_errors_total
// series, so backends keep only codes in [MinXID, MaxXID] and at most
// MaxXIDCodes distinct ones per device; a driver bug or a hostile caller
// of the simulated backend cannot then grow the series without bound.
const (
	MinXID = 1
	// MaxXID leaves room for codes that drivers newer than the catalogue
	// add.
	MaxXID = 255
	// MaxXIDCodes is far above the handful of distinct codes a failing
	// GPU raises in practice.
	MaxXIDCodes = 32
)

// ValidXID reports whether code is in the range of XID codes.
func ValidXID(code uint64) bool { return code >= MinXID && code <= MaxXID }

// Reading is one collection of one device.
type Reading struct {
	Device Device
	// Err is set when the device could not be read this time (it is lost,
	// or cannot even be named); the device is then reported unhealthy and
	// none of its fields are exported. A single field that fails is not
	// the device's failure: it is left absent and listed in FieldErrors.
	Err error
	// FieldErrors are the fields that could not be read this time, each
	// with why; they are absent from the reading.
	FieldErrors []FieldError
	values      [NumFields]float64
	present     uint64
	// XIDCounts counts XID errors by code since the backend started. Its
	// codes are ValidXID and at most MaxXIDCodes.
	XIDCounts map[uint64]uint64
	// Processes are the compute processes on the device, with their share
	// of it since the previous collection; nil when the backend does not
	// read them.
	Processes []Process
}

// FieldError is one field a backend failed to read.
type FieldError struct {
	Field Field
	// Code names the failure, for NVML its return code
	// ("ERROR_UNKNOWN"); a small closed set, used as a label value.
	Code string
}

// Process is one process using a device. Its utilization is the mean of
// the driver's samples since the previous collection, so that the shares
// of every process on a time-sliced GPU add up to the device's
// utilization within the driver's sampling.
type Process struct {
	PID uint32
	// SMUtil and MemUtil are percents of the device; HasUtil is false
	// when the driver had no sample of the process in the window.
	SMUtil, MemUtil float64
	HasUtil         bool
	// UsedMemoryMiB is the framebuffer memory the process holds; HasMemory
	// is false where the driver cannot tell (Windows WDDM, some vGPUs).
	UsedMemoryMiB float64
	HasMemory     bool
}

// Set records a field's value.
func (r *Reading) Set(f Field, v float64) {
	r.values[f] = v
	r.present |= 1 << uint64(f)
}

// Get returns a field's value and whether the backend reported it.
func (r *Reading) Get(f Field) (float64, bool) {
	if f >= NumFields || r.present&(1<<uint64(f)) == 0 {
		return 0, false
	}
	return r.values[f], true
}

// Healthy reports whether the device was read successfully.
func (r *Reading) Healthy() bool { return r.Err == nil }

// FatalXIDs are the XID codes that mean a GPU or its driver needs
// attention (uncorrectable ECC error 48, NVLink error 74, fallen off the
// bus 79, contained and uncontained ECC errors 94 and 95, and the like).
// Their counters are served at 0 from the start, so that increase() in an
// alert sees the first one.
var FatalXIDs = []uint64{48, 63, 64, 74, 79, 92, 94, 95, 119, 120}

// Kind is a backend's kind.
type Kind uint8

const (
	KindNVML Kind = iota + 1
	// KindSim is the simulated backend: every series it feeds is marked
	// simulated.
	KindSim
)

// String returns "nvml" or "sim", the --backend flag's values.
func (k Kind) String() string {
	switch k {
	case KindNVML:
		return "nvml"
	case KindSim:
		return "sim"
	}
	return "unknown"
}

// Simulated reports whether the kind serves made-up data.
func (k Kind) Simulated() bool { return k == KindSim }

// Backend reads every device on the node. It is consumed by the exporter's
// collection loop, which is its only caller (no concurrent Collect calls).
type Backend interface {
	// Kind is the backend's kind.
	Kind() Kind
	// DriverVersion is the driver version label value.
	DriverVersion() string
	// Collect reads every device. Failures of one device are reported in its
	// Reading; an error means nothing could be read at all.
	Collect(ctx context.Context) ([]Reading, error)
	// Close releases the backend's resources.
	Close() error
}
