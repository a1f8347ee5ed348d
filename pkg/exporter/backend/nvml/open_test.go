//go:build linux && cgo

package nvml

import (
	"strings"
	"testing"
)

// TestOpenReadsTheDriver: Open loads the driver's library at run time.
// Where there is none (CI, a CPU node) it fails with NVML's reason and no
// backend, never a typed nil the caller would take for a GPU; where there
// is one, it returns a backend that closes.
func TestOpenReadsTheDriver(t *testing.T) {
	b, err := Open(Options{})
	if err != nil {
		if b != nil {
			t.Fatalf("Open failed (%v) and returned a backend %#v", err, b)
		}
		if !strings.Contains(err.Error(), "NVML") && !strings.Contains(err.Error(), "nvml") {
			t.Errorf("Open's error %q does not say NVML failed", err)
		}
		t.Logf("no driver here: %v", err)
		return
	}
	if b == nil {
		t.Fatal("Open returned neither a backend nor an error")
	}
	if err := b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}
