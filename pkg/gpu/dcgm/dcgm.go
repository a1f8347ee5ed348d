// Package dcgm names, once, the series and labels of NVIDIA's dcgm-exporter
// that gpuscale serves and reads, in both of dcgm-exporter's naming schemas:
// the exporter renders them, the adapter's ingest and its PromQL defaults
// read them. It holds the naming mechanics only (schemas, units, labels, the
// shape of a field's names), no code beyond unit arithmetic, so that readers
// of the series do not link the exporter. Which fields there are, with their
// names and help in each schema, is pkg/gpu's table (gpu.Specs), keyed by
// the field backends fill.
//
// dcgm-exporter renamed its series twice (release notes): 4.8.3 renamed the
// Hostname label to hostname; 4.9.0 renamed the default and profiling
// fields that DCGM 4.7 deprecates (eleven of them to other units) and the
// driver-version label; 4.10.0 renamed the PCIe and NVLink profiling rates.
// Schema48 is the naming of 4.8 and earlier, Schema410 that of 4.10.
package dcgm

import (
	"fmt"
	"strings"
)

// Schema is one of dcgm-exporter's naming schemas.
type Schema uint8

const (
	// Schema48 is dcgm-exporter's naming up to 4.8: DCGM_FI_DEV_GPU_UTIL in
	// percent, DCGM_FI_DEV_FB_USED in MiB, the DCGM_FI_DRIVER_VERSION
	// label. Its node label is Hostname (4.8.2 and earlier) or hostname
	// (4.8.3 and 4.8.4); gpuscale serves both.
	Schema48 Schema = iota + 1
	// Schema410 is dcgm-exporter 4.10's naming: DCGM 4.7's field names and
	// units (DCGM_FI_DEV_GPU_UTIL_RATIO from 0 to 1, DCGM_FI_DEV_FB_USED_BYTES),
	// the hostname and DCGM_FI_SYSTEM_DRIVER_VERSION labels.
	Schema410
)

// Schemas lists the schemas, oldest first.
var Schemas = []Schema{Schema48, Schema410}

// String returns "4.8" or "4.10", the exporter flag's values.
func (s Schema) String() string {
	switch s {
	case Schema48:
		return "4.8"
	case Schema410:
		return "4.10"
	}
	return "unknown"
}

// ParseSchema parses a Schema's String.
func ParseSchema(s string) (Schema, error) {
	for _, sc := range Schemas {
		if s == sc.String() {
			return sc, nil
		}
	}
	return 0, fmt.Errorf("dcgm: unknown naming schema %q: want 4.8 or 4.10", s)
}

// dcgm-exporter's label names.
const (
	LabelGPU       = "gpu"
	LabelUUID      = "UUID"
	LabelDevice    = "device"
	LabelModelName = "modelName"
	// LabelHostname is the node label of dcgm-exporter 4.8.2 and earlier,
	// LabelHostnameLower that of 4.8.3 and later.
	LabelHostname      = "Hostname"
	LabelHostnameLower = "hostname"
	LabelPCIBusID      = "pci_bus_id"
	// LabelDriverVersion is the driver-version label of 4.8 and earlier,
	// LabelSystemDriverVersion that of 4.9 and later.
	LabelDriverVersion       = "DCGM_FI_DRIVER_VERSION"
	LabelSystemDriverVersion = "DCGM_FI_SYSTEM_DRIVER_VERSION"
	LabelGPUIProfile         = "GPU_I_PROFILE"
	LabelGPUIID              = "GPU_I_ID"
	LabelNamespace           = "namespace"
	LabelPod                 = "pod"
	LabelContainer           = "container"
	// LabelPodUID is added by --kubernetes-enable-pod-uid.
	LabelPodUID = "pod_uid"
	// LabelXID and LabelWindowSize are DCGM_EXP_XID_ERRORS_COUNT's.
	LabelXID        = "xid"
	LabelWindowSize = "window_size_in_ms"
)

// HostnameLabels are the labels that may name a series' node, in the order
// readers look for them.
var HostnameLabels = []string{LabelHostname, LabelHostnameLower}

// HostnameLabels returns the node labels the schema carries.
func (s Schema) HostnameLabels() []string {
	if s == Schema410 {
		return []string{LabelHostnameLower}
	}
	return HostnameLabels
}

// DriverVersionLabel returns the schema's driver-version label.
func (s Schema) DriverVersionLabel() string {
	if s == Schema410 {
		return LabelSystemDriverVersion
	}
	return LabelDriverVersion
}

// XIDErrorsCount is dcgm-exporter's count of the XID errors of each code
// within its window (--xid-count-window-size), one series per code seen,
// or one without the xid label at 0. Same name in both schemas.
const XIDErrorsCount = "DCGM_EXP_XID_ERRORS_COUNT"

// GPUShared is gpuscale's marker of a device whose GPU_UTIL and FB_USED
// series are per-pod shares that add up to the device's value, rather than
// dcgm-exporter's copies of it; readers that aggregate per device need it.
const GPUShared = "gpuscale_gpu_shared"

// Type is a series' Prometheus type.
type Type uint8

const (
	Gauge Type = iota
	Counter
)

// String returns "gauge" or "counter".
func (t Type) String() string {
	if t == Counter {
		return "counter"
	}
	return "gauge"
}

// Unit is the unit a series' values are in.
type Unit uint8

const (
	None Unit = iota
	Percent
	Ratio
	MiB
	Bytes
	MHz
	Hz
	Millijoules
	Joules
	Watts
	Celsius
	Nanoseconds
	KBPerSecond
	MBPerSecond
	BytesPerSecond
)

var unitNames = [...]string{None: "", Percent: "%", Ratio: "ratio", MiB: "MiB", Bytes: "B", MHz: "MHz", Hz: "Hz",
	Millijoules: "mJ", Joules: "J", Watts: "W", Celsius: "C", Nanoseconds: "ns", KBPerSecond: "KB/s",
	MBPerSecond: "MB/s", BytesPerSecond: "B/s"}

// String returns the unit as help strings write it ("MiB", "%").
func (u Unit) String() string { return unitNames[u] }

// base gives each unit's factor to a base unit of its dimension, and the
// dimension: a value times the factor is in the base unit.
var base = [...]struct {
	dim    string
	factor float64
}{
	None: {"", 1}, Percent: {"fraction", 0.01}, Ratio: {"fraction", 1},
	MiB: {"bytes", 1 << 20}, Bytes: {"bytes", 1},
	MHz: {"frequency", 1e6}, Hz: {"frequency", 1},
	Millijoules: {"energy", 1e-3}, Joules: {"energy", 1},
	Watts: {"power", 1}, Celsius: {"temperature", 1}, Nanoseconds: {"time", 1e-9},
	KBPerSecond: {"rate", 1e3}, MBPerSecond: {"rate", 1e6}, BytesPerSecond: {"rate", 1},
}

// Scale returns the factor that converts a value in from to one in to, or
// false when they measure different things.
func Scale(from, to Unit) (float64, bool) {
	f, t := base[from], base[to]
	if f.dim != t.dim {
		return 0, false
	}
	if from == to {
		return 1, true
	}
	return f.factor / t.factor, true
}

// Field is one quantity dcgm-exporter serves, as each schema names it.
type Field struct {
	// Name48 and Name410 are its names in the 4.8 and 4.10 schemas; ""
	// where the schema has no such series. Name49 is its name in 4.9
	// where that differs from 4.10's.
	Name48, Name49, Name410 string
	Unit48, Unit410         Unit
	Type                    Type
	// Help describes the field; a "%s" in it is replaced by the unit.
	Help string
	// Default48 and Default410 say whether dcgm-exporter's shipped default
	// collector (etc/default-counters.csv) selects it in 4.8 and 4.10.
	Default48, Default410 bool
}

// Name returns the field's name in s.
func (f *Field) Name(s Schema) string {
	if s == Schema410 {
		return f.Name410
	}
	return f.Name48
}

// Unit returns the unit of the field's values in s.
func (f *Field) Unit(s Schema) Unit {
	if s == Schema410 {
		return f.Unit410
	}
	return f.Unit48
}

// HelpText returns the field's help string in s.
func (f *Field) HelpText(s Schema) string {
	if !strings.Contains(f.Help, "%s") {
		return f.Help
	}
	if f.Unit(s) == Ratio {
		return strings.Replace(f.Help, "(in %s)", "(ratio, 0 to 1)", 1)
	}
	return fmt.Sprintf(f.Help, f.Unit(s))
}

// Alias is one name under which readers accept a field, and the factor
// that converts its values to the field's 4.8 unit.
type Alias struct {
	Name string
	// ToUnit48 multiplies a value of this name into Unit48.
	ToUnit48 float64
}

// Aliases returns every name of the field, the 4.8 one first.
func (f *Field) Aliases() []Alias {
	var out []Alias
	if f.Name48 != "" {
		out = append(out, Alias{f.Name48, 1})
	}
	if f.Name410 != "" && f.Name410 != f.Name48 {
		k, ok := Scale(f.Unit410, f.Unit48)
		if !ok {
			panic("dcgm: " + f.Name410 + " cannot be converted to " + f.Name48)
		}
		out = append(out, Alias{f.Name410, k})
	}
	if f.Name49 != "" && f.Name49 != f.Name48 {
		k, _ := Scale(f.Unit410, f.Unit48)
		out = append(out, Alias{f.Name49, k})
	}
	return out
}
