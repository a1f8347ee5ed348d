package store

import (
	"math"
	"testing"
	"unsafe"
)

// TestSignalsDeclared: every signal constant has its line in the signals
// table, and a Sample can mark it present.
func TestSignalsDeclared(t *testing.T) {
	var s Sample
	if bits := 8 * unsafe.Sizeof(s.present); uintptr(NumSignals) > bits {
		t.Fatalf("%d signals, but Sample.present has %d bits", NumSignals, bits)
	}
	names := map[string]Signal{}
	for sig := Signal(0); sig < NumSignals; sig++ {
		d := signals[sig]
		if d.name == "" {
			t.Errorf("signal %d has no line in the signals table", sig)
			continue
		}
		if prev, dup := names[d.name]; dup {
			t.Errorf("signals %d and %d are both named %q", prev, sig, d.name)
		}
		names[d.name] = sig
		r := sig.Range()
		if !(r.Min <= r.Max) || math.IsInf(r.Max, 0) {
			t.Errorf("%s: range %+v", sig, r)
		}
		if dr := sig.DeviceRange(); !(dr.Min >= r.Min && dr.Max <= r.Max) {
			t.Errorf("%s: one device's range %+v is wider than the object's %+v", sig, dr, r)
		}
		s.Set(sig, r.Max)
		if v, ok := s.Get(sig); !ok || v != r.Max {
			t.Errorf("%s: Get after Set = %v, %v", sig, v, ok)
		}
	}
}
