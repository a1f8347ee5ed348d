//go:build linux && cgo

package nvml

import (
	"errors"
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestNewInitFails(t *testing.T) {
	tests := []struct {
		ret  gonvml.Return
		want []string
	}{
		{gonvml.ERROR_LIBRARY_NOT_FOUND, []string{
			"nvml: initialise NVML: ERROR_LIBRARY_NOT_FOUND: is the NVIDIA driver installed",
			"--backend=sim",
		}},
		{gonvml.ERROR_DRIVER_NOT_LOADED, []string{"ERROR_DRIVER_NOT_LOADED: is the NVIDIA driver installed"}},
		{gonvml.ERROR_NO_PERMISSION, []string{"ERROR_NO_PERMISSION: is the NVIDIA driver installed"}},
		{gonvml.ERROR_LIB_RM_VERSION_MISMATCH, []string{"does not match the loaded kernel driver"}},
		{gonvml.ERROR_UNKNOWN, []string{"nvml: initialise NVML: ERROR_UNKNOWN"}},
	}
	for _, tt := range tests {
		t.Run(tt.ret.Error(), func(t *testing.T) {
			f := newFixture(healthyGPU(0))
			f.initRet = tt.ret
			b, err := New(f.lib, Options{XIDEvents: true})
			if err == nil || b != nil {
				t.Fatalf("New = %v, %v; want an error", b, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			var ret gonvml.Return
			if !errors.As(err, &ret) || ret != tt.ret {
				t.Errorf("errors.As(Return) = %v, want %v", ret, tt.ret)
			}
			// NVML was never initialised: nothing to shut down.
			if n := f.shutdowns.Load(); n != 0 {
				t.Errorf("Shutdown called %d times", n)
			}
		})
	}
}

func TestNewShutsDownOnLaterFailure(t *testing.T) {
	f := newFixture(healthyGPU(0))
	f.lib.DeviceGetCountFunc = func() (int, gonvml.Return) { return 0, gonvml.ERROR_UNKNOWN }
	_, err := New(f.lib, Options{XIDEvents: true})
	if err == nil || !strings.Contains(err.Error(), "get device count: ERROR_UNKNOWN") {
		t.Fatalf("New error = %v, want the device count failure", err)
	}
	if n := f.shutdowns.Load(); n != 1 {
		t.Errorf("Shutdown called %d times, want 1", n)
	}
}

// TestNewWithoutDriver runs go-nvml for real: without a driver, Init must
// fail cleanly (go-nvml cannot dlopen libnvidia-ml.so.1) and New must say so.
func TestNewWithoutDriver(t *testing.T) {
	probe := gonvml.New()
	if probe.Init() == gonvml.SUCCESS {
		probe.Shutdown()
		t.Skip("an NVIDIA driver is present; this test is for driverless machines")
	}
	b, err := New(gonvml.New(), Options{XIDEvents: true})
	if err == nil {
		_ = b.Close()
		t.Fatal("New succeeded without a driver")
	}
	if !strings.Contains(err.Error(), "NVML") || !strings.Contains(err.Error(), "--backend=sim") {
		t.Errorf("error %q does not explain the missing driver", err)
	}
	t.Logf("New without a driver: %v", err)
}

func TestPCIBusID(t *testing.T) {
	tests := []struct {
		name          string
		busID, legacy string
		want          string
	}{
		{"bus id", "00000000:3b:00.0", "0000:3b:00.0", "00000000:3B:00.0"},
		{"legacy only", "", "0000:3B:00.0", "00000000:3B:00.0"},
	}
	for _, tt := range tests {
		var pci gonvml.PciInfo
		copy(pci.BusId[:], cChars(tt.busID))
		copy(pci.BusIdLegacy[:], cChars(tt.legacy))
		if got := pciBusID(pci); got != tt.want {
			t.Errorf("%s: pciBusID = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestDecodeFieldValue(t *testing.T) {
	tests := []struct {
		typ  gonvml.ValueType
		v    float64
		want float64
	}{
		{gonvml.VALUE_TYPE_DOUBLE, 71.25, 71.25},
		{gonvml.VALUE_TYPE_UNSIGNED_INT, 4e9, 4e9},
		{gonvml.VALUE_TYPE_UNSIGNED_LONG, 1 << 40, 1 << 40},
		{gonvml.VALUE_TYPE_UNSIGNED_LONG_LONG, 1 << 50, 1 << 50},
		{gonvml.VALUE_TYPE_SIGNED_LONG_LONG, -5, -5},
		{gonvml.VALUE_TYPE_SIGNED_INT, -40, -40},
		{gonvml.VALUE_TYPE_UNSIGNED_SHORT, 65535, 65535},
	}
	for _, tt := range tests {
		got, ok := decodeFieldValue(gonvml.FieldValue{ValueType: uint32(tt.typ), Value: encodeValue(tt.typ, tt.v)})
		if !ok || got != tt.want {
			t.Errorf("type %d: decode = %v, %v; want %v", tt.typ, got, ok, tt.want)
		}
	}
	if _, ok := decodeFieldValue(gonvml.FieldValue{ValueType: uint32(gonvml.VALUE_TYPE_COUNT)}); ok {
		t.Error("unknown value type decoded")
	}
}
