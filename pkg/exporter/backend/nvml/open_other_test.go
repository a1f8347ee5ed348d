//go:build !(linux && cgo)

package nvml

import (
	"strings"
	"testing"
)

// TestOpenWithoutCgo: a build without cgo has no NVML; Open says so and
// points at the simulated backend.
func TestOpenWithoutCgo(t *testing.T) {
	b, err := Open(Options{})
	if err == nil || b != nil {
		t.Fatalf("Open = %v, %v; want no backend and an error", b, err)
	}
	if !strings.Contains(err.Error(), "--backend=sim") {
		t.Errorf("error %q does not name --backend=sim", err)
	}
}
